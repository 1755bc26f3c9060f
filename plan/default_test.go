package plan_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/plan"
	"github.com/mageguard/mageguard/rollout"
)

// defaultInputs is the plan input of configs/default.yaml (with sets) on a
// device of deviceBytes, as `mageguard plan` builds it.
func defaultInputs(t *testing.T, deviceBytes int64, sets ...string) plan.Inputs {
	t.Helper()
	cfg, mem, judge, _ := defaultConfig(t, sets...)
	in, err := plan.FromConfig(plan.Config{Model: cfg.Model, Rollout: cfg.Rollout, GRPO: cfg.GRPO, MaxTurns: cfg.Train.MaxTurns,
		MemorySystemTokens: mem, JudgeSystemTokens: judge, DeviceBytes: deviceBytes})
	if err != nil {
		t.Fatal(err)
	}
	if !in.Checkpointing {
		t.Fatal("configs/default.yaml does not set grpo.gradient_checkpointing")
	}
	return in
}

// defaultConfig is configs/default.yaml (with sets) and the tokens of its
// guard's memory, judge and judge-only system prompts.
func defaultConfig(t *testing.T, sets ...string) (cfg *config.Config, mem, judge, judgeOnly int) {
	t.Helper()
	cfg, err := config.Load("../configs/default.yaml", append([]string{"model.tokenizer=../assets/qwen3"}, sets...))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(cfg.Model.Tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	g, err := rollout.NewGuard(cfg.Rollout, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	mem, judge, judgeOnly = g.PrefixTokens()
	return cfg, mem, judge, judgeOnly
}

// configs/default.yaml is Qwen3-4B (its architecture keys, no weights
// needed) in bfloat16 with float32 masters on XLA, and fits a 141 GB GPU;
// the log holds its plans on 141 GB and 80 GB for docs/real-use.md:
//
//	go test -count=1 -run TestDefaultConfigPlan -v ./plan
func TestDefaultConfigPlan(t *testing.T) {
	in := defaultInputs(t, 141e9)
	if n := in.Arch.NumParameters(); n != 4022468096 || in.WeightBytes != 2 || in.MasterBytes != 4 || in.InPlace {
		t.Fatalf("default.yaml: %d parameters, %d bytes a weight, masters %d, in place %v; want Qwen3-4B in bfloat16 with float32 masters on XLA",
			n, in.WeightBytes, in.MasterBytes, in.InPlace)
	}
	p, err := plan.Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the longest calls: %+v in training, %+v in generation", in.Train, in.Rollout)
	var b strings.Builder
	if err := p.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	t.Logf("configs/default.yaml on 141 GB:\n%s", b.String())
	if fits, known := p.Fits(); !known || !fits {
		t.Errorf("configs/default.yaml does not fit 141 GB: %s", p.Summary())
	}
	if p.MaxMicroBatch < in.MicroBatchSize || p.MaxRolloutBatch < in.Rollout.Rows {
		t.Errorf("largest sizes %d, %d below the file's %d, %d", p.MaxMicroBatch, p.MaxRolloutBatch, in.MicroBatchSize, in.Rollout.Rows)
	}

	// 80 GB: the file as it is, without the reference, and without master
	// weights too (grpo.master_dtype: bfloat16, which rounds away updates as
	// small as a 1e-6 learning rate makes them).
	for _, v := range []struct {
		name    string
		sets    []string
		masters bool
	}{
		{"as it is", nil, true},
		{"grpo.beta=0", []string{"grpo.beta=0"}, true},
		{"grpo.beta=0, no master weights, micro-batches of 4, rollout batches of 4",
			[]string{"grpo.beta=0", "grpo.micro_batch_size=4", "rollout.batch_size=4"}, false},
	} {
		in := defaultInputs(t, 80e9, v.sets...)
		if !v.masters {
			in.MasterBytes = 0
		}
		p, err := plan.Compute(in)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("configs/default.yaml, %s, on 80 GB: %s", v.name, p.Summary())
	}
}

// The local generator keeps each role's system prompt prefilled: the memory
// and judge prompts of the MAGE guard, the judge-only prompt alone; a
// remote generator keeps nothing here.
func TestFromConfigKeptPrefixes(t *testing.T) {
	cfg, mem, judge, judgeOnly := defaultConfig(t)
	for _, c := range []struct {
		variant, generator string
		judgeTokens        int
		want               []int
	}{
		{"mage", "local", judge, []int{mem, judge}},
		{"judge-only", "local", judgeOnly, []int{judgeOnly}},
		{"mage", "openai", judge, nil},
	} {
		r := cfg.Rollout
		r.Variant, r.Generator = c.variant, c.generator
		in, err := plan.FromConfig(plan.Config{Model: cfg.Model, Rollout: r, GRPO: cfg.GRPO,
			MemorySystemTokens: mem, JudgeSystemTokens: c.judgeTokens})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(in.KeptPrefixes, c.want) {
			t.Errorf("%s with the %s generator: kept prefixes %v, want %v", c.variant, c.generator, in.KeptPrefixes, c.want)
		}
	}
	if mem < 400 || judge < 100 || judgeOnly < 100 {
		t.Errorf("system prompts of %d, %d and %d tokens: not the guard's", mem, judge, judgeOnly)
	}
}
