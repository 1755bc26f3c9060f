package grpo

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/model"
)

// allWeights returns every variable of the model (trainable or not, the trainer's state left
// out) as float32, by scope and name.
func allWeights(t *testing.T, ctx *context.Context) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for v := range ctx.IterVariables() {
		if strings.HasPrefix(v.Scope(), StateScope) {
			continue
		}
		value, err := v.Value()
		if err != nil {
			t.Fatal(err)
		}
		f, err := toFloat32(value)
		if err != nil {
			t.Fatal(err)
		}
		out[v.ScopeAndName()] = tensors.MustCopyFlatData[float32](f)
	}
	return out
}

// loraSavings say which savings a LoRA run uses.
type loraSavings struct{ chunk, shared, blocked, ckpt bool }

// loraRun trains a rank-4 adapter (α 8, every projection) on a random 2-layer Qwen3 (vocabulary
// 1000) for two steps with a KL reference computed through model.WithoutAdapter, and returns
// the model's variables before and after each step, the steps' stats, the reference log-probs
// and the trainer.
func loraRun(t *testing.T, dtype dtypes.DType, s loraSavings) (snaps []map[string][]float32, stats []Stats, ref [][]float32, tr *Trainer) {
	mcfg := model.DefaultTinyConfig()
	mcfg.VocabSize, mcfg.BOSTokenID, mcfg.EOSTokenIDs = 1000, 0, []int{1}
	m, err := model.New(backend(t), &mcfg, 3, dtype)
	if err != nil {
		t.Fatal(err)
	}
	m.SetLMHeadChunk(map[bool]int{false: 0, true: 100}[s.chunk])
	m.SetAttentionBlock(map[bool]int{false: 0, true: 8}[s.blocked])
	if err := m.AddAdapter(model.LoRAConfig{Rank: 4, Alpha: 8, Targets: model.DefaultLoRAConfig().Targets}, 11, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.MicroBatchSize, cfg.SharedPrefix = 1e-2, 0, 0.04, 4, s.shared
	cfg.AdamEpsilon = 1 // updates ≈ lr·m̂: the adapters' weights compare their gradients
	cfg.GradientCheckpointing = s.ckpt
	if tr, err = NewTrainer(backend(t), m.Context(), func(ctx *context.Context, tokens, attn, pos *Node) *Node {
		return m.TokenLogProbs(ctx, tokens, attn, pos, 0.9)
	}, cfg, 0); err != nil {
		t.Fatal(err)
	}
	tr.SetSharedPolicy(func(ctx *context.Context, prefix, prefixMask, tokens, attn, pos *Node) *Node {
		return m.TokenLogProbsShared(ctx, prefix, prefixMask, tokens, attn, pos, 0.9)
	})
	tr.SetStagedPolicy(modelStages(m, 0.9))
	b, err := NewBatch(guardLikeBatch(t, rand.New(rand.NewPCG(9, 9)), mcfg.VocabSize))
	if err != nil {
		t.Fatal(err)
	}
	refCtx := model.WithoutAdapter(m.Context())
	if b.RefLogProbs, err = tr.LogProbs(refCtx, b); err != nil {
		t.Fatal(err)
	}
	snaps = append(snaps, allWeights(t, m.Context()))
	for range 2 {
		st, err := tr.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		stats = append(stats, st)
		snaps = append(snaps, allWeights(t, m.Context()))
	}
	// The reference after the steps: the base, unchanged by them.
	if ref, err = tr.LogProbs(refCtx, b); err != nil {
		t.Fatal(err)
	}
	for i := range ref {
		for k := range ref[i] {
			if ref[i][k] != b.RefLogProbs[i][k] {
				t.Fatalf("reference log-prob [%d][%d] moved from %v to %v: WithoutAdapter is not the base", i, k, b.RefLogProbs[i][k], ref[i][k])
			}
		}
	}
	return snaps, stats, ref, tr
}

// TestLoRATrainsOnlyTheAdapter: with an adapter attached, two GRPO steps (β > 0, the reference
// through model.WithoutAdapter) leave every base weight bit for bit as it was and keep
// optimizer state (moments, and float32 masters in bfloat16) for the adapter's variables only.
// B moves at the first step; A only at the second (in bfloat16, its master) (its gradient s·Bᵀ·∂y·x is 0 while B is 0); the
// policy moves away from the reference (KL > 0 at step 2). Every saving (chunked head, shared
// prefix, blocked attention, activation checkpointing) gives the same adapter weights within
// 1e-7 (Adam's ε = 1: the gradients agree to ~1e-5 of lr).
func TestLoRATrainsOnlyTheAdapter(t *testing.T) {
	var plain map[string][]float32
	for _, c := range []struct {
		dtype dtypes.DType
		s     loraSavings
	}{
		{dtypes.Float32, loraSavings{}},
		{dtypes.Float32, loraSavings{chunk: true, shared: true, blocked: true, ckpt: true}},
		{dtypes.Float32, loraSavings{ckpt: true}},
		{dtypes.BFloat16, loraSavings{chunk: true, shared: true, blocked: true}},
	} {
		snaps, stats, _, tr := loraRun(t, c.dtype, c.s)
		name := c.dtype.String()
		masters := map[string][]float32{}
		mw, err := tr.MasterWeights()
		if err != nil {
			t.Fatal(err)
		}
		for key, m := range mw {
			masters[key] = tensors.MustCopyFlatData[float32](m)
		}
		var adapters int
		for key, before := range snaps[0] {
			lora := strings.HasPrefix(key, model.AdapterScope+"/")
			after1, after2 := snaps[1][key], snaps[2][key]
			switch {
			case !lora:
				if !same(before, after2) {
					t.Errorf("%s %+v: base weight %s changed", name, c.s, key)
				}
			case strings.HasSuffix(key, "/lora_B"):
				adapters++
				if same(before, after1) || !allZero(before) {
					t.Errorf("%s %+v: %s did not start at 0 and move at step 1", name, c.s, key)
				}
			default:
				adapters++
				if c.dtype == dtypes.BFloat16 { // lr·m̂ rounds away in bfloat16: the float32 master moves
					after2 = masters[key]
				}
				if !same(before, after1) || same(after1, after2) {
					t.Errorf("%s %+v: %s moved at step 1 (%v) or not at step 2 (%v)", name, c.s, key, !same(before, after1), !same(after1, after2))
				}
			}
		}
		if adapters != 2*7*2 { // 2 layers × 7 projections × (A, B)
			t.Errorf("%s: %d adapter variables, want 28", name, adapters)
		}
		if !(stats[1].MeanKL > 0) {
			t.Errorf("%s %+v: step 2 KL %v", name, c.s, stats[1].MeanKL)
		}
		state, err := tr.OptimizerState()
		if err != nil {
			t.Fatal(err)
		}
		nMasters := 0
		for key := range state {
			if key == "step" {
				continue
			}
			kind, rest, _ := strings.Cut(key, "/")
			if !strings.HasPrefix("/"+rest, model.AdapterScope+"/") {
				t.Errorf("%s: optimizer state %s is not an adapter's", name, key)
			}
			if kind == "master" {
				nMasters++
			}
		}
		// Moments and masters (a float32 variable is saved as its own master) of the 28 only.
		if len(state) != 1+28*3 || nMasters != 28 || len(masters) != map[bool]int{true: 28, false: 0}[c.dtype == dtypes.BFloat16] {
			t.Errorf("%s: %d optimizer state tensors, %d masters saved, %d kept", name, len(state), nMasters, len(masters))
		}
		if c.dtype != dtypes.Float32 {
			continue
		}
		if plain == nil {
			plain = snaps[2]
			continue
		}
		var worst float64
		for key, w := range plain {
			for i := range w {
				worst = max(worst, math.Abs(float64(w[i]-snaps[2][key][i])))
			}
		}
		if worst > 1e-7 {
			t.Errorf("%+v: weights after 2 steps differ from the plain path's by %g", c.s, worst)
		}
	}
}

func same(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

func allZero(a []float32) bool {
	for _, x := range a {
		if x != 0 {
			return false
		}
	}
	return true
}

// TestLoRAGradientIsTheProjectedFullGradient: at the first step (B = 0) the gradient of B is
// s·G·Aᵀ, where G is the gradient full fine-tuning gets for the base weight W (y = x·Wᵀ +
// s·(x·Aᵀ)·Bᵀ, so ∂L/∂B = s·(∂L/∂y)ᵀ·(x·Aᵀ) = s·G·Aᵀ), and A's is 0. Both gradients are read
// from the first AdamW moment after one unclipped step (m = (1 − β1)·g), on the same base and
// batch, and the product is written out here.
func TestLoRAGradientIsTheProjectedFullGradient(t *testing.T) {
	mcfg := model.DefaultTinyConfig()
	mcfg.VocabSize, mcfg.BOSTokenID, mcfg.EOSTokenIDs = 1000, 0, []int{1}
	cfg := DefaultConfig()
	cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.MicroBatchSize, cfg.MaxGradNorm = 1e-3, 0, 0, 4, 0
	firstMoments := func(lora bool) (map[string][]float32, *model.Model) {
		m, err := model.New(backend(t), &mcfg, 3, dtypes.Float32)
		if err != nil {
			t.Fatal(err)
		}
		if lora {
			if err := m.AddAdapter(model.LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "down_proj"}}, 11, t.TempDir()); err != nil {
				t.Fatal(err)
			}
		}
		tr, err := NewTrainer(backend(t), m.Context(), func(ctx *context.Context, tokens, attn, pos *Node) *Node {
			return m.TokenLogProbs(ctx, tokens, attn, pos, 1)
		}, cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewBatch(guardLikeBatch(t, rand.New(rand.NewPCG(9, 9)), mcfg.VocabSize))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Step(b); err != nil {
			t.Fatal(err)
		}
		state, err := tr.OptimizerState()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for key, v := range state {
			if strings.HasPrefix(key, "exp_avg/") {
				out[strings.TrimPrefix(key, "exp_avg")] = tensors.MustCopyFlatData[float32](v)
			}
		}
		return out, m
	}
	full, _ := firstMoments(false)
	lora, m := firstMoments(true)
	s, r := 2.0, 4
	H, I, Q := mcfg.HiddenSize, mcfg.IntermediateSize, mcfg.NumAttentionHeads*mcfg.HeadDim
	for _, c := range []struct {
		module  string
		out, in int
	}{{"model/layers/0/self_attn/q_proj", Q, H}, {"model/layers/1/mlp/down_proj", H, I}} {
		g := full["/"+c.module+"/weight"]
		gA, gB := lora["/lora/"+c.module+"/lora_A"], lora["/lora/"+c.module+"/lora_B"]
		aVar := m.Context().GetVariableByScopeAndName("/lora/"+c.module, "lora_A")
		a := tensors.MustCopyFlatData[float32](aVar.MustValue())
		if len(g) != c.out*c.in || len(gB) != c.out*r || len(gA) != r*c.in {
			t.Fatalf("%s: moments of sizes %d, %d, %d", c.module, len(g), len(gA), len(gB))
		}
		if !allZero(gA) {
			t.Errorf("%s: A has a gradient while B is 0", c.module)
		}
		var worst, scale float64
		for o := range c.out {
			for k := range r {
				var want float64
				for i := range c.in {
					want += float64(g[o*c.in+i]) * float64(a[k*c.in+i])
				}
				want *= s
				scale = max(scale, math.Abs(want))
				worst = max(worst, math.Abs(float64(gB[o*r+k])-want))
			}
		}
		if scale == 0 || worst > 1e-4*scale {
			t.Errorf("%s: B's gradient differs from s·G·Aᵀ by %g (largest %g)", c.module, worst, scale)
		}
	}
	for key := range lora {
		if !strings.HasPrefix(key, "/lora/") {
			t.Errorf("LoRA run: a moment for %s", key)
		}
	}
}
