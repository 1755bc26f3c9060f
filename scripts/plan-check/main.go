// Command plan-check checks mageguard plan's training-step total against
// the peak Go heap of a real GRPO step on the pure-Go backend (its tensors
// are Go slices), for three small configurations of different shapes:
// within 25% of the peak live heap (runtime/metrics /gc/heap/live:bytes,
// sampled every 2 ms with the GC at 5%), the peak object bytes
// (/memory/classes/heap/objects:bytes, which also counts dead objects not
// yet freed) printed beside it. The backend runs its ops in program order
// (model.ops_sequential), the order the plan counts in. A minute or two of
// CPU:
//
//	go run ./scripts/plan-check [--all] [--parallel]
//
// --all adds a bfloat16 case, slow on the pure-Go backend; --parallel also
// measures the default parallel scheduler.
package main

import (
	"flag"
	"fmt"
	"runtime/debug"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/mageguard/mageguard/bench"
	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/internal/heapstat"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/plan"
	"github.com/mageguard/mageguard/scripts/internal/check"
)

// planCase is one configuration of the check.
type planCase struct {
	name     string
	arch     func(c *model.Config)
	bf16     bool
	grpo     func(c *grpo.Config)
	shape    bench.TrainShape
	lmChunk  int
	slowOnly bool // bfloat16 runs slowly on the pure-Go backend: only with --all
}

// planCases are three small configurations of different shapes, each
// stressing another part of the plan, and a bfloat16 one.
var planCases = []planCase{
	{
		name: "layers (4 × hidden 256, untied 8K vocabulary, β > 0)",
		arch: func(c *model.Config) {
			c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 256, 768, 4
			c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 4, 2, 64
			c.VocabSize, c.TieWordEmbeddings = 8192, false
		},
		grpo:  func(c *grpo.Config) { c.MicroBatchSize, c.Beta = 8, 0.04 },
		shape: bench.TrainShape{Rows: 8, RowTokens: 128, TargetTokens: 32},
	},
	{
		name: "attention (8 heads over 512 keys, shared prefix, 2 micro-batches)",
		arch: func(c *model.Config) {
			c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 128, 384, 2
			c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 8, 2, 32
			c.VocabSize, c.TieWordEmbeddings = 4096, true
		},
		grpo:  func(c *grpo.Config) { c.MicroBatchSize, c.Beta = 2, 0 },
		shape: bench.TrainShape{Rows: 4, PrefixTokens: 128, RowTokens: 384, TargetTokens: 64},
	},
	{
		name: "vocabulary (Qwen3's 151,936 ids, tied, chunked LM head)",
		arch: func(c *model.Config) {
			c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 64, 192, 2
			c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 4, 2, 16
			c.VocabSize, c.TieWordEmbeddings = 151936, true
		},
		grpo:    func(c *grpo.Config) { c.MicroBatchSize, c.Beta = 8, 0.04 },
		shape:   bench.TrainShape{Rows: 8, PrefixTokens: 32, RowTokens: 64, TargetTokens: 32},
		lmChunk: 8192,
	},
	{
		name: "attention in bfloat16",
		arch: func(c *model.Config) {
			c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 128, 384, 2
			c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 8, 2, 32
			c.VocabSize, c.TieWordEmbeddings = 4096, true
		},
		bf16:     true,
		grpo:     func(c *grpo.Config) { c.MicroBatchSize, c.Beta = 2, 0 },
		shape:    bench.TrainShape{Rows: 4, PrefixTokens: 128, RowTokens: 384, TargetTokens: 64},
		slowOnly: true,
	},
}

func main() {
	all := flag.Bool("all", false, "add the bfloat16 case (slow on the pure-Go backend)")
	parallel := flag.Bool("parallel", false, "also measure the default parallel scheduler")
	flag.Parse()
	check.Main("plan-check", func(t *check.T) { planCheck(t, *all, *parallel) })
}

func planCheck(t *check.T, all, parallel bool) {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(1 << 62))
	fmt.Printf("| configuration | parameters | plan: training step | measured live peak | Δ | measured object peak | Δ | parallel scheduler: live peak |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|\n")
	for _, pc := range planCases {
		if pc.slowOnly && !all {
			continue
		}
		seq := measurePlanCase(t, pc, true)
		par := "not measured"
		if parallel {
			p := measurePlanCase(t, pc, false)
			par = fmt.Sprintf("%s (%+.0f%%)", plan.FormatSize(p.live), 100*(float64(p.plan)-float64(p.live))/float64(p.live))
		}
		dLive := (float64(seq.plan) - float64(seq.live)) / float64(seq.live)
		dObj := (float64(seq.plan) - float64(seq.objects)) / float64(seq.objects)
		fmt.Printf("| %s | %d | %s (%s) | %s | %+.0f%% | %s | %+.0f%% | %s |\n", pc.name, seq.params,
			plan.FormatSize(seq.plan), seq.peak, plan.FormatSize(seq.live), 100*dLive, plan.FormatSize(seq.objects), 100*dObj, par)
		if dLive > 0.25 || dLive < -0.25 {
			t.Errorf("%s: plan %d bytes, measured live peak %d bytes: %+.0f%%, beyond 25%%", pc.name, seq.plan, seq.live, 100*dLive)
		}
	}
}

// planMeasure is one measured case.
type planMeasure struct {
	params        int64
	plan          int64  // the plan's training-step total
	peak          string // its peak phase
	live, objects int64  // measured peaks above the heap before the model existed
}

func measurePlanCase(t *check.T, pc planCase, sequential bool) planMeasure {
	t.Helper()
	bc := backend.Default()
	bc.OpsSequential = sequential
	bc.GCPercent, bc.MemoryLimitMB = 0, -1 // the test set them
	b, err := backend.New(bc)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Finalize()
	start := heapstat.LiveBytes()
	arch := model.DefaultTinyConfig()
	pc.arch(&arch)
	arch.BOSTokenID, arch.EOSTokenIDs = 0, []int{1}
	dt := dtypes.Float32
	if pc.bf16 {
		dt = dtypes.BFloat16
	}
	m, err := model.New(b, &arch, 1, dt)
	if err != nil {
		t.Fatal(err)
	}
	m.SetLMHeadChunk(pc.lmChunk)
	cfg := grpo.DefaultConfig()
	pc.grpo(&cfg)
	opts := bench.TrainOptions{Steps: 1, Heap: true, Seed: 3}
	if cfg.Beta > 0 {
		if opts.Reference, err = grpo.FrozenCopy(m.Context()); err != nil {
			t.Fatal(err)
		}
	}
	res, err := bench.TrainStep(m, cfg, pc.shape, opts)
	if err != nil {
		t.Fatalf("%s: %v", pc.name, err)
	}
	masters := 0
	if dt != dtypes.Float32 && cfg.MasterDType == "float32" {
		masters = 4
	}
	p, err := plan.Compute(plan.Inputs{
		Arch: arch, WeightBytes: int(dt.Size()), MasterBytes: masters, Reference: cfg.Beta > 0,
		Train: plan.TrainShape(pc.shape), MicroBatchSize: cfg.MicroBatchSize, SharedPrefix: cfg.SharedPrefix,
		Checkpointing: cfg.GradientCheckpointing, UpdateGroupLayers: cfg.UpdateGroupLayers,
		LMHeadChunk: pc.lmChunk, AttentionBlock: m.AttentionBlock(), InPlace: true,
		Rollout: plan.RolloutShape{Rows: 1, PromptTokens: 1, NewTokens: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	total, peak := p.TrainTotal()
	return planMeasure{
		params: arch.NumParameters(), plan: total, peak: peak,
		live: int64(res.HeapLivePeakBytes) - int64(start), objects: int64(res.HeapPeakBytes) - int64(start),
	}
}
