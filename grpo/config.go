package grpo

import (
	"fmt"
	"math"
)

// Loss aggregations (Config.LossAggregation).
const (
	// AggSeqMeanTokenMean averages each sequence's tokens, then the sequences (GRPO).
	AggSeqMeanTokenMean = "seq-mean-token-mean"
	// AggTokenMean averages all counted tokens of the step's batch together.
	AggTokenMean = "token-mean"
)

// Reward scalings (Config.ScaleRewards).
const (
	// ScaleGroup divides by the group's standard deviation (GRPO).
	ScaleGroup = "group"
	// ScaleNone only subtracts the group mean (Dr. GRPO).
	ScaleNone = "none"
)

// Losses (Config.Loss): the per-token objective obj_k (docs/design.md#turn-wise-grpo).
const (
	// LossGRPO is the clipped token ratio min(ρA, clip(ρ, 1−ε, 1+ε_high)A).
	LossGRPO = "grpo"
	// LossDAPO is LossGRPO's ratio with token-mean aggregation and dynamic sampling, whatever
	// loss_aggregation and dynamic_sampling say.
	LossDAPO = "dapo"
	// LossGSPO clips the sequence's geometric-mean ratio s_b instead of each token's.
	LossGSPO = "gspo"
	// LossCISPO weighs log π_θ by the truncated ratio sg(min(ρ, 1+ε_high)) A: no lower bound, and
	// every token keeps a gradient.
	LossCISPO = "cispo"
)

// Rollout corrections (Config.RolloutCorrection): a weight c on each token's objective for the
// gap between the sampler's log-probs and π_old's.
const (
	CorrectionNone = "none" // c = 1
	CorrectionTIS  = "tis"  // truncated importance sampling: c = min(r, C)
	CorrectionMIS  = "mis"  // masked importance sampling: c = [1/C ≤ r ≤ C]
)

// Levels of the rollout correction (Config.RolloutCorrectionLevel).
const (
	LevelToken    = "token"    // r_k = exp(log π_old − log π_rollout) at each token
	LevelSequence = "sequence" // r = exp(Σ_k m (log π_old − log π_rollout)) for the whole sequence
)

// Learning-rate schedules after the warm-up (Config.LRSchedule).
const (
	ScheduleConstant = "constant"
	ScheduleLinear   = "linear"
	ScheduleCosine   = "cosine"
)

// Config holds the turn-wise GRPO and optimizer settings (the `grpo` section of the configuration).
type Config struct {
	LearningRate float64 `yaml:"learning_rate"` // peak learning rate of AdamW, reached after the warm-up
	AdamBeta1    float64 `yaml:"adam_beta1"`    // AdamW β1: decay of the gradient's moving average, in [0, 1)
	AdamBeta2    float64 `yaml:"adam_beta2"`    // AdamW β2: decay of the squared gradient's moving average, in [0, 1)
	AdamEpsilon  float64 `yaml:"adam_epsilon"`  // AdamW ε added to √v̂ in the denominator, > 0
	WeightDecay  float64 `yaml:"weight_decay"`  // decoupled weight decay, applied to variables of rank ≥ 2 (matrices, embeddings)
	MaxGradNorm  float64 `yaml:"max_grad_norm"` // global gradient-norm clip; 0 turns clipping off
	WarmupSteps  int     `yaml:"warmup_steps"`  // optimizer steps of linear warm-up from lr/warmup_steps to lr
	LRSchedule   string  `yaml:"lr_schedule"`   // after the warm-up: constant | linear | cosine (decay to 0 at the last step)
	ClipEpsilon  float64 `yaml:"clip_epsilon"`  // ε of the clipped ratio: clip(ρ, 1−ε, 1+ε_high)
	// ClipEpsilonHigh is ε_high, the upper clip 1+ε_high (DAPO's clip-higher; CISPO's truncation
	// bound, e.g. 4); 0 = clip_epsilon. Any finite value ≥ clip_epsilon is accepted.
	ClipEpsilonHigh float64 `yaml:"clip_epsilon_high"`
	Loss            string  `yaml:"loss"`             // grpo | dapo | gspo | cispo: the per-token objective (docs/design.md#turn-wise-grpo)
	Beta            float64 `yaml:"beta"`             // β: coefficient of the k3 KL penalty against the reference policy; 0 needs no reference
	NumIterations   int     `yaml:"num_iterations"`   // μ: optimizer steps taken on each rollout batch (π_old stays the rollout policy)
	ScaleRewards    string  `yaml:"scale_rewards"`    // group (divide advantages by the group std) | none (Dr. GRPO)
	LossAggregation string  `yaml:"loss_aggregation"` // seq-mean-token-mean (GRPO) | token-mean
	MicroBatchSize  int     `yaml:"micro_batch_size"` // sequences per forward/backward graph; gradients accumulate over micro-batches
	// SharedPrefix computes the prompt prefix that a micro-batch's rows share (a role's system
	// prompt) once per micro-batch, in the policy and the reference forward, when the trainer
	// has a SharedPolicyFn (Trainer.SetSharedPolicy).
	SharedPrefix bool `yaml:"shared_prefix"`
	// MasterDType is the dtype the optimizer updates the weights in: float32 keeps float32
	// master weights beside weights of another dtype (bfloat16 training: the products run on
	// the bfloat16 weights, AdamW updates the float32 masters and writes them back rounded);
	// bfloat16 updates bfloat16 weights in place (small updates round away).
	MasterDType string `yaml:"master_dtype"`
	// UpdateGroupLayers is the decoder layers whose AdamW update runs as one graph: the
	// update of a group allocates (without buffer aliasing, on XLA) only that group's new
	// weights and moments; 0 = every variable in one graph. Variables outside the model's
	// layers (embedding, final norm, LM head) form a group of their own.
	UpdateGroupLayers int `yaml:"update_group_layers"`
	// GradientCheckpointing runs the policy's stages (embedding, each decoder layer, head) as
	// graphs of their own and recomputes each layer from its saved input in the backward
	// (checkpoint.go), when the trainer has a StagedPolicy: a step keeps one input per layer
	// instead of every layer's activations.
	GradientCheckpointing bool `yaml:"gradient_checkpointing"`
	// SkipZeroAdvantage leaves the sequences whose advantage is 0 out of a step's forward and
	// backward when β = 0: their loss and gradient are exactly 0 (ℓ_k = −min(ρ_k·0,
	// clip(ρ_k)·0)), and the step's denominator still counts them, so the loss and the update
	// are unchanged. A group whose samples all earned one reward has only such sequences.
	// The step's ratio, clip, KL and entropy diagnostics are then means over the sequences
	// that ran. No effect when β > 0 (the KL term has a gradient at every token) or with a
	// rollout correction (its metrics cover every sequence of the step).
	SkipZeroAdvantage bool `yaml:"skip_zero_advantage"`

	// RolloutCorrection weighs each token's objective by c, a constant computed from the
	// sampler's log-probs (recorded at generation) and π_old's: none (c = 1) | tis (c = min(r, C))
	// | mis (c = 1 when 1/C ≤ r ≤ C, else 0).
	RolloutCorrection string `yaml:"rollout_correction"`
	// RolloutCorrectionLevel says where r is taken: token (r_k = exp(log π_old − log π_rollout))
	// or sequence (r = exp(Σ_k m (log π_old − log π_rollout)), one weight for all its tokens).
	RolloutCorrectionLevel string `yaml:"rollout_correction_level"`
	// RolloutCorrectionCap is C, finite and ≥ 1.
	RolloutCorrectionCap float64 `yaml:"rollout_correction_cap"`

	// DynamicSampling (package train) leaves out of a step the trajectories whose trained
	// sequences all have advantage 0 (each of their groups earned one reward) and draws more
	// trajectories until the step has train.trajectories with a non-zero advantage, or
	// DynamicSamplingDraws extra draws are spent. On under loss dapo whatever it says.
	DynamicSampling bool `yaml:"dynamic_sampling"`
	// DynamicSamplingDraws is the budget: extra draws of train.trajectories trajectories each
	// that a step may take under dynamic sampling, ≥ 1.
	DynamicSamplingDraws int `yaml:"dynamic_sampling_draws"`
}

// EpsilonHigh returns ε_high: ClipEpsilonHigh, or ClipEpsilon when it is 0.
func (c *Config) EpsilonHigh() float64 {
	if c.ClipEpsilonHigh == 0 {
		return c.ClipEpsilon
	}
	return c.ClipEpsilonHigh
}

// Aggregation returns the loss aggregation the objective uses: token-mean under loss dapo,
// else LossAggregation.
func (c *Config) Aggregation() string {
	if c.Loss == LossDAPO {
		return AggTokenMean
	}
	return c.LossAggregation
}

// DynamicSamplingOn reports whether steps draw more trajectories when theirs have advantage 0
// everywhere: dynamic_sampling, or loss dapo.
func (c *Config) DynamicSamplingOn() bool { return c.DynamicSampling || c.Loss == LossDAPO }

// Corrects reports whether a rollout correction weighs the objective.
func (c *Config) Corrects() bool { return c.RolloutCorrection != CorrectionNone }

// DefaultConfig returns the defaults: AdamW(1e-6, 0.9, 0.999, 1e-8), no weight decay, clip norm
// 1.0, 10 warm-up steps then a constant rate, ε = 0.2, β = 0.04, μ = 1, group scaling,
// seq-mean-token-mean, micro-batches of 8 sequences sharing their prompt prefix, sequences of
// advantage 0 skipped when β = 0; loss grpo with ε_high = ε, no rollout correction (C = 2 at
// the token level when one is chosen), no dynamic sampling (4 extra draws when on).
func DefaultConfig() Config {
	return Config{
		LearningRate:      1e-6,
		AdamBeta1:         0.9,
		AdamBeta2:         0.999,
		AdamEpsilon:       1e-8,
		WeightDecay:       0,
		MaxGradNorm:       1.0,
		WarmupSteps:       10,
		LRSchedule:        ScheduleConstant,
		ClipEpsilon:       0.2,
		Beta:              0.04,
		NumIterations:     1,
		ScaleRewards:      ScaleGroup,
		LossAggregation:   AggSeqMeanTokenMean,
		MicroBatchSize:    8,
		SharedPrefix:      true,
		MasterDType:       "float32",
		UpdateGroupLayers: 4,
		SkipZeroAdvantage: true,

		Loss:                   LossGRPO,
		RolloutCorrection:      CorrectionNone,
		RolloutCorrectionLevel: LevelToken,
		RolloutCorrectionCap:   2,
		DynamicSamplingDraws:   4,
	}
}

// finiteAtLeast reports whether x is finite and ≥ lo.
func finiteAtLeast(x, lo float64) bool { return x >= lo && !math.IsInf(x, 0) }

// Validate checks every setting; errors start with the key name.
func (c *Config) Validate() error {
	switch {
	case !(c.LearningRate > 0) || math.IsInf(c.LearningRate, 0):
		return fmt.Errorf("learning_rate must be a finite number > 0, got %v", c.LearningRate)
	case !(c.AdamBeta1 >= 0 && c.AdamBeta1 < 1):
		return fmt.Errorf("adam_beta1 must be in [0, 1), got %v", c.AdamBeta1)
	case !(c.AdamBeta2 >= 0 && c.AdamBeta2 < 1):
		return fmt.Errorf("adam_beta2 must be in [0, 1), got %v", c.AdamBeta2)
	case !(c.AdamEpsilon > 0) || math.IsInf(c.AdamEpsilon, 0):
		return fmt.Errorf("adam_epsilon must be a finite number > 0, got %v", c.AdamEpsilon)
	case !finiteAtLeast(c.WeightDecay, 0):
		return fmt.Errorf("weight_decay must be a finite number ≥ 0, got %v", c.WeightDecay)
	case !finiteAtLeast(c.MaxGradNorm, 0):
		return fmt.Errorf("max_grad_norm must be a finite number ≥ 0 (0 = no clipping), got %v", c.MaxGradNorm)
	case c.WarmupSteps < 0:
		return fmt.Errorf("warmup_steps must be ≥ 0, got %d", c.WarmupSteps)
	case c.LRSchedule != ScheduleConstant && c.LRSchedule != ScheduleLinear && c.LRSchedule != ScheduleCosine:
		return fmt.Errorf("lr_schedule must be %s, %s or %s, got %q", ScheduleConstant, ScheduleLinear, ScheduleCosine, c.LRSchedule)
	case !(c.ClipEpsilon > 0 && c.ClipEpsilon < 1):
		return fmt.Errorf("clip_epsilon must be in (0, 1), got %v", c.ClipEpsilon)
	case c.ClipEpsilonHigh != 0 && !(finiteAtLeast(c.ClipEpsilonHigh, c.ClipEpsilon)):
		return fmt.Errorf("clip_epsilon_high must be 0 (= clip_epsilon) or a finite number ≥ clip_epsilon (%v), got %v", c.ClipEpsilon, c.ClipEpsilonHigh)
	case c.Loss != LossGRPO && c.Loss != LossDAPO && c.Loss != LossGSPO && c.Loss != LossCISPO:
		return fmt.Errorf("loss must be %s, %s, %s or %s, got %q", LossGRPO, LossDAPO, LossGSPO, LossCISPO, c.Loss)
	case c.RolloutCorrection != CorrectionNone && c.RolloutCorrection != CorrectionTIS && c.RolloutCorrection != CorrectionMIS:
		return fmt.Errorf("rollout_correction must be %s, %s or %s, got %q", CorrectionNone, CorrectionTIS, CorrectionMIS, c.RolloutCorrection)
	case c.RolloutCorrectionLevel != LevelToken && c.RolloutCorrectionLevel != LevelSequence:
		return fmt.Errorf("rollout_correction_level must be %s or %s, got %q", LevelToken, LevelSequence, c.RolloutCorrectionLevel)
	case !finiteAtLeast(c.RolloutCorrectionCap, 1):
		return fmt.Errorf("rollout_correction_cap must be a finite number ≥ 1, got %v", c.RolloutCorrectionCap)
	case c.DynamicSamplingDraws < 1 || c.DynamicSamplingDraws > 1000:
		return fmt.Errorf("dynamic_sampling_draws must be in [1, 1000], got %d", c.DynamicSamplingDraws)
	case !finiteAtLeast(c.Beta, 0):
		return fmt.Errorf("beta must be a finite number ≥ 0, got %v", c.Beta)
	case c.NumIterations < 1:
		return fmt.Errorf("num_iterations must be ≥ 1, got %d", c.NumIterations)
	case c.ScaleRewards != ScaleGroup && c.ScaleRewards != ScaleNone:
		return fmt.Errorf("scale_rewards must be %s or %s, got %q", ScaleGroup, ScaleNone, c.ScaleRewards)
	case c.LossAggregation != AggSeqMeanTokenMean && c.LossAggregation != AggTokenMean:
		return fmt.Errorf("loss_aggregation must be %s or %s, got %q", AggSeqMeanTokenMean, AggTokenMean, c.LossAggregation)
	case c.MasterDType != "float32" && c.MasterDType != "bfloat16":
		return fmt.Errorf("master_dtype must be float32 or bfloat16, got %q", c.MasterDType)
	case c.UpdateGroupLayers < 0:
		return fmt.Errorf("update_group_layers must be >= 0 (0 = one update graph), got %d", c.UpdateGroupLayers)
	case c.MicroBatchSize < 1:
		return fmt.Errorf("micro_batch_size must be ≥ 1, got %d", c.MicroBatchSize)
	}
	return nil
}
