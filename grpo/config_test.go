package grpo_test

import (
	"math"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/grpo"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*grpo.Config)
		want string // "" = valid
	}{
		{"defaults", func(*grpo.Config) {}, ""},
		{"no clipping, token-mean, cosine", func(c *grpo.Config) {
			c.MaxGradNorm, c.LossAggregation, c.LRSchedule = 0, grpo.AggTokenMean, grpo.ScheduleCosine
		}, ""},
		{"learning rate 0", func(c *grpo.Config) { c.LearningRate = 0 }, "learning_rate must be a finite number > 0, got 0"},
		{"beta1 1", func(c *grpo.Config) { c.AdamBeta1 = 1 }, "adam_beta1 must be in [0, 1), got 1"},
		{"beta2 NaN", func(c *grpo.Config) { c.AdamBeta2 = math.NaN() }, "adam_beta2 must be in [0, 1), got NaN"},
		{"epsilon 0", func(c *grpo.Config) { c.AdamEpsilon = 0 }, "adam_epsilon must be a finite number > 0, got 0"},
		{"weight decay negative", func(c *grpo.Config) { c.WeightDecay = -0.1 }, "weight_decay must be a finite number ≥ 0, got -0.1"},
		{"grad norm negative", func(c *grpo.Config) { c.MaxGradNorm = -1 }, "max_grad_norm must be a finite number ≥ 0 (0 = no clipping), got -1"},
		{"warmup negative", func(c *grpo.Config) { c.WarmupSteps = -1 }, "warmup_steps must be ≥ 0, got -1"},
		{"schedule", func(c *grpo.Config) { c.LRSchedule = "step" }, `lr_schedule must be constant, linear or cosine, got "step"`},
		{"clip epsilon", func(c *grpo.Config) { c.ClipEpsilon = 0 }, "clip_epsilon must be in (0, 1), got 0"},
		{"beta", func(c *grpo.Config) { c.Beta = math.Inf(1) }, "beta must be a finite number ≥ 0, got +Inf"},
		{"iterations", func(c *grpo.Config) { c.NumIterations = 0 }, "num_iterations must be ≥ 1, got 0"},
		{"scale", func(c *grpo.Config) { c.ScaleRewards = "batch" }, `scale_rewards must be group or none, got "batch"`},
		{"aggregation", func(c *grpo.Config) { c.LossAggregation = "sum" }, `loss_aggregation must be seq-mean-token-mean or token-mean, got "sum"`},
		{"micro batch", func(c *grpo.Config) { c.MicroBatchSize = 0 }, "micro_batch_size must be ≥ 1, got 0"},
		{"cispo with a high bound of 4, tis per sequence", func(c *grpo.Config) {
			c.Loss, c.ClipEpsilonHigh, c.RolloutCorrection, c.RolloutCorrectionLevel = grpo.LossCISPO, 4, grpo.CorrectionTIS, grpo.LevelSequence
		}, ""},
		{"draws 0", func(c *grpo.Config) { c.DynamicSamplingDraws = 0 }, "dynamic_sampling_draws must be in [1, 1000], got 0"},
		{"draws 1001", func(c *grpo.Config) { c.DynamicSamplingDraws = 1001 }, "dynamic_sampling_draws must be in [1, 1000], got 1001"},
		{"loss", func(c *grpo.Config) { c.Loss = "ppo" }, `loss must be grpo, dapo, gspo or cispo, got "ppo"`},
		{"epsilon high below epsilon", func(c *grpo.Config) { c.ClipEpsilonHigh = 0.1 }, "clip_epsilon_high must be 0 (= clip_epsilon) or a finite number ≥ clip_epsilon (0.2), got 0.1"},
		{"epsilon high +Inf", func(c *grpo.Config) { c.ClipEpsilonHigh = math.Inf(1) }, "clip_epsilon_high must be 0 (= clip_epsilon) or a finite number ≥ clip_epsilon (0.2), got +Inf"},
		{"epsilon high NaN", func(c *grpo.Config) { c.ClipEpsilonHigh = math.NaN() }, "clip_epsilon_high must be 0 (= clip_epsilon) or a finite number ≥ clip_epsilon (0.2), got NaN"},
		{"correction", func(c *grpo.Config) { c.RolloutCorrection = "icepop" }, `rollout_correction must be none, tis or mis, got "icepop"`},
		{"correction level", func(c *grpo.Config) { c.RolloutCorrectionLevel = "geometric" }, `rollout_correction_level must be token or sequence, got "geometric"`},
		{"correction cap below 1", func(c *grpo.Config) { c.RolloutCorrectionCap = 0.5 }, "rollout_correction_cap must be a finite number ≥ 1, got 0.5"},
		{"correction cap NaN", func(c *grpo.Config) { c.RolloutCorrectionCap = math.NaN() }, "rollout_correction_cap must be a finite number ≥ 1, got NaN"},
		{"correction cap +Inf", func(c *grpo.Config) { c.RolloutCorrectionCap = math.Inf(1) }, "rollout_correction_cap must be a finite number ≥ 1, got +Inf"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := grpo.DefaultConfig()
			c.edit(&cfg)
			err := cfg.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil || err.Error() != c.want {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

// TestConfigSections checks that the rewards and grpo sections are wired into the project
// configuration: defaults, --set overrides by yaml key, and validation naming the key.
func TestConfigSections(t *testing.T) {
	cfg, err := config.Load("", []string{
		"rewards.gamma=0", "rewards.lambda=0.5", "rewards.format_penalty=0.2", "rewards.length_threshold=600",
		"grpo.learning_rate=3e-6", "grpo.beta=0", "grpo.loss_aggregation=token-mean", "grpo.micro_batch_size=4",
		"grpo.scale_rewards=none", "grpo.num_iterations=2", "grpo.lr_schedule=cosine",
		"grpo.loss=gspo", "grpo.clip_epsilon_high=0.28", "grpo.rollout_correction=mis", "grpo.rollout_correction_level=sequence",
		"grpo.rollout_correction_cap=3",
	})
	if err != nil {
		t.Fatal(err)
	}
	r, g := cfg.Rewards, cfg.GRPO
	if r.Gamma != 0 || r.Lambda != 0.5 || r.FormatPenalty != 0.2 || r.LengthThreshold != 600 {
		t.Errorf("rewards section: %+v", r)
	}
	if g.LearningRate != 3e-6 || g.Beta != 0 || g.LossAggregation != grpo.AggTokenMean || g.MicroBatchSize != 4 ||
		g.ScaleRewards != grpo.ScaleNone || g.NumIterations != 2 || g.LRSchedule != grpo.ScheduleCosine ||
		g.Loss != grpo.LossGSPO || g.ClipEpsilonHigh != 0.28 || g.RolloutCorrection != grpo.CorrectionMIS ||
		g.RolloutCorrectionLevel != grpo.LevelSequence || g.RolloutCorrectionCap != 3 {
		t.Errorf("grpo section: %+v", g)
	}
	if g.AdamBeta2 != grpo.DefaultConfig().AdamBeta2 {
		t.Errorf("untouched key changed: adam_beta2 = %v", g.AdamBeta2)
	}
	for set, want := range map[string]string{
		"rewards.gamma=1.5":    "config: rewards.gamma must be in [0, 1), got 1.5",
		"grpo.clip_epsilon=2":  "config: grpo.clip_epsilon must be in (0, 1), got 2",
		"grpo.lr_schedule=exp": `config: grpo.lr_schedule must be constant, linear or cosine, got "exp"`,
	} {
		_, err := config.Load("", []string{set})
		if err == nil || err.Error() != want {
			t.Errorf("--set %s: error %v, want %q", set, err, want)
		}
	}
	if d := config.Default(); d.Rewards.Gamma != 0.5 || d.GRPO.ClipEpsilon != 0.2 {
		t.Errorf("config.Default() does not hold the sections' defaults: %+v %+v", d.Rewards, d.GRPO)
	}
	out, err := config.Marshal(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"length_threshold: 2500", "loss_aggregation: seq-mean-token-mean", "micro_batch_size: 8",
		"loss: grpo", "clip_epsilon_high: 0", "rollout_correction: none", "rollout_correction_level: token", "rollout_correction_cap: 2"} {
		if !strings.Contains(string(out), key) {
			t.Errorf("resolved config lacks %q:\n%s", key, out)
		}
	}
}
