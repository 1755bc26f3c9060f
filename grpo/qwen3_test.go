package grpo

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/mageguard/mageguard/model"
)

// TestTrainsQwen3 drives the trainer with the project's Qwen3 (package model, a random
// 2-layer model with a 256-id vocabulary) as the PolicyFn: the trainer's padded, bucketed
// log-probs equal the model's own full-logits scoring, and AdamW steps run with a reference
// copy and micro-batches.
func TestTrainsQwen3(t *testing.T) {
	mcfg := model.DefaultTinyConfig()
	mcfg.VocabSize, mcfg.BOSTokenID, mcfg.EOSTokenIDs = 256, 0, []int{1}
	m, err := model.New(backend(t), &mcfg, 1, dtypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	policy := func(ctx *context.Context, tokens, attn, pos *Node) *Node {
		return m.TokenLogProbs(ctx, tokens, attn, pos, 1)
	}
	cfg := DefaultConfig()
	cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.MicroBatchSize = 1e-3, 0, 0.04, 2
	tr, err := NewTrainer(backend(t), m.Context(), policy, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := FrozenCopy(m.Context())
	if err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewPCG(4, 4))
	var seqs []Sequence
	var full [][]int
	for i := range 5 {
		s := Sequence{Phase: Phase(i % 2), Advantage: float32(rng.NormFloat64())}
		for range 2 + rng.IntN(6) {
			s.Prompt = append(s.Prompt, int32(2+rng.IntN(254)))
		}
		for range 1 + rng.IntN(5) {
			s.Completion = append(s.Completion, int32(2+rng.IntN(254)))
		}
		seqs = append(seqs, s)
		var ids []int
		for _, x := range append(append([]int32{}, s.Prompt...), s.Completion...) {
			ids = append(ids, int(x))
		}
		full = append(full, ids)
	}
	b, err := NewBatch(seqs)
	if err != nil {
		t.Fatal(err)
	}

	// The trainer's log-probs against the model's own scoring (all positions, one batch).
	logp, err := tr.LogProbs(m.Context(), b)
	if err != nil {
		t.Fatal(err)
	}
	score, err := m.Score(full, model.ScoreOptions{MaxNewTokens: 1, NLastLogits: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		for k := range s.Completion {
			want := score[i].NextTokenLogprobs[len(s.Prompt)+k-1]
			if d := math.Abs(float64(logp[i][k]) - want); d > 1e-4 {
				t.Fatalf("sequence %d token %d: trainer log-prob %v, model scoring %v", i, k, logp[i][k], want)
			}
		}
	}

	if b.RefLogProbs, err = tr.LogProbs(ref, b); err != nil {
		t.Fatal(err)
	}
	// Step 1: ρ = 1 and π_θ = π_ref, so the loss is −mean advantage over the 5 sequences.
	st, err := tr.Step(b)
	if err != nil {
		t.Fatal(err)
	}
	want := 0.0
	for _, s := range seqs {
		want -= float64(s.Advantage) / 5
	}
	if math.Abs(st.Loss-want) > 1e-5 || st.MeanKL > 1e-6 || math.Abs(st.MeanRatio-1) > 1e-6 {
		t.Fatalf("step 1: loss %v (want %v), kl %v, ratio %v", st.Loss, want, st.MeanKL, st.MeanRatio)
	}
	st, err = tr.Step(b)
	if err != nil {
		t.Fatal(err)
	}
	if !(st.MeanKL > 0) || st.GradNorm == 0 {
		t.Fatalf("step 2: the policy did not move away from the reference: %v", st)
	}
	t.Log(st)
}

// guardLikeBatch returns sequences shaped like a guard's: two phases, each phase's prompts
// starting with its own 24-token "system prompt", then a few own tokens and a completion.
func guardLikeBatch(t *testing.T, rng *rand.Rand, vocab int) []Sequence {
	t.Helper()
	system := [2][]int32{}
	for p := range system {
		for range 24 {
			system[p] = append(system[p], int32(2+rng.IntN(vocab-2)))
		}
	}
	var seqs []Sequence
	for i := range 7 {
		p := Phase(i % 2)
		s := Sequence{Phase: p, Advantage: float32(rng.NormFloat64()), Prompt: append([]int32(nil), system[p]...)}
		for range 1 + rng.IntN(6) {
			s.Prompt = append(s.Prompt, int32(2+rng.IntN(vocab-2)))
		}
		for range 2 + rng.IntN(5) {
			s.Completion = append(s.Completion, int32(2+rng.IntN(vocab-2)))
		}
		s.Forced = make([]bool, len(s.Completion))
		s.Forced[0] = true // a forced token (structured decoding): not a target
		seqs = append(seqs, s)
	}
	// Memory calls first, then judge calls, as train orders them.
	slices.SortStableFunc(seqs, func(a, b Sequence) int { return int(a.Phase) - int(b.Phase) })
	return seqs
}

// TestSavingsChangeNothing runs two optimizer steps (with a KL reference) on the same
// guard-shaped batch with every saving of the update off — the LM head over the whole
// vocabulary, each row computed whole, the plain attention — and with each on and all on:
// the chunked LM head (chunks of 100 over a 1000-token vocabulary), the shared prefix (each
// phase's 24-token system prompt once per micro-batch), the blocked attention (blocks of 8
// queries), activation checkpointing (each stage a graph, each layer recomputed in the
// backward), alone and with the shared prefix. The losses, gradient norms and reference log-probs agree
// within 1e-5 relative, and every weight after the steps within 1e-7 (with Adam's ε = 1 the
// updates are lr times the gradients' moving averages, so that is the gradients agreeing to
// ~1e-5 of lr).
func TestSavingsChangeNothing(t *testing.T) {
	type savings struct{ chunk, shared, blocked, ckpt bool }
	run := func(s savings) (losses, norms []float64, ref [][]float32, w map[string][]float32) {
		mcfg := model.DefaultTinyConfig()
		mcfg.VocabSize, mcfg.BOSTokenID, mcfg.EOSTokenIDs = 1000, 0, []int{1}
		m, err := model.New(backend(t), &mcfg, 3, dtypes.Float32)
		if err != nil {
			t.Fatal(err)
		}
		m.SetLMHeadChunk(map[bool]int{false: 0, true: 100}[s.chunk])
		m.SetAttentionBlock(map[bool]int{false: 0, true: 8}[s.blocked])
		cfg := DefaultConfig()
		cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.MicroBatchSize, cfg.SharedPrefix = 1e-2, 0, 0.04, 4, s.shared
		cfg.AdamEpsilon = 1 // ε ≫ √v: each update ≈ lr·m̂, linear in the gradient, so the weights compare the gradients
		cfg.GradientCheckpointing = s.ckpt
		tr, err := NewTrainer(backend(t), m.Context(), func(ctx *context.Context, tokens, attn, pos *Node) *Node {
			return m.TokenLogProbs(ctx, tokens, attn, pos, 0.9)
		}, cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		tr.SetSharedPolicy(func(ctx *context.Context, prefix, prefixMask, tokens, attn, pos *Node) *Node {
			return m.TokenLogProbsShared(ctx, prefix, prefixMask, tokens, attn, pos, 0.9)
		})
		tr.SetStagedPolicy(modelStages(m, 0.9))
		refCtx, err := FrozenCopy(m.Context())
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewBatch(guardLikeBatch(t, rand.New(rand.NewPCG(9, 9)), mcfg.VocabSize))
		if err != nil {
			t.Fatal(err)
		}
		if ref, err = tr.LogProbs(refCtx, b); err != nil {
			t.Fatal(err)
		}
		b.RefLogProbs = ref
		for range 2 {
			st, err := tr.Step(b)
			if err != nil {
				t.Fatal(err)
			}
			losses, norms = append(losses, st.Loss), append(norms, st.GradNorm)
		}
		return losses, norms, ref, modelWeights(t, m.Context())
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-5*math.Max(1, math.Abs(b)) }
	offL, offN, offRef, offW := run(savings{})
	for _, s := range []savings{{chunk: true}, {shared: true}, {blocked: true}, {ckpt: true}, {shared: true, ckpt: true},
		{chunk: true, shared: true, blocked: true, ckpt: true}} {
		l, n, ref, w := run(s)
		for i := range offL {
			if !near(l[i], offL[i]) || !near(n[i], offN[i]) {
				t.Errorf("%+v step %d: loss %v grad_norm %v, all off %v %v", s, i+1, l[i], n[i], offL[i], offN[i])
			}
		}
		for i := range ref {
			for k := range ref[i] {
				if !near(float64(ref[i][k]), float64(offRef[i][k])) {
					t.Fatalf("%+v: reference log-prob [%d][%d] %v, all off %v", s, i, k, ref[i][k], offRef[i][k])
				}
			}
		}
		if d := maxWeightDiff(w, offW); d > 1e-7 {
			t.Errorf("%+v: weights after 2 steps differ from all off by %g", s, d)
		}
	}
}

// modelWeights returns every trainable variable of ctx (the model, not the trainer's state)
// by its scope and name.
func modelWeights(t *testing.T, ctx *context.Context) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for v := range ctx.IterVariables() {
		if !v.Trainable {
			continue
		}
		value, err := v.Value()
		if err != nil {
			t.Fatal(err)
		}
		out[v.ScopeAndName()] = tensors.MustCopyFlatData[float32](value)
	}
	if len(out) == 0 {
		t.Fatal("no trainable variable")
	}
	return out
}

// qwenTrainer returns a trainer of a fresh random Qwen3 (vocabulary 1000, 3 layers) in dtype,
// with cfg's settings, on a guard-shaped batch with reference log-probs.
func qwenTrainer(t *testing.T, dtype dtypes.DType, cfg Config) (*model.Model, *Trainer, *Batch) {
	t.Helper()
	mcfg := model.DefaultTinyConfig()
	mcfg.VocabSize, mcfg.NumHiddenLayers, mcfg.BOSTokenID, mcfg.EOSTokenIDs = 1000, 3, 0, []int{1}
	m, err := model.New(backend(t), &mcfg, 5, dtype)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(backend(t), m.Context(), func(ctx *context.Context, tokens, attn, pos *Node) *Node {
		return m.TokenLogProbs(ctx, tokens, attn, pos, 1)
	}, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	refCtx, err := FrozenCopy(m.Context())
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBatch(guardLikeBatch(t, rand.New(rand.NewPCG(2, 3)), mcfg.VocabSize))
	if err != nil {
		t.Fatal(err)
	}
	if b.RefLogProbs, err = tr.LogProbs(refCtx, b); err != nil {
		t.Fatal(err)
	}
	return m, tr, b
}

// TestGroupedUpdateEqualsOneUpdate: the AdamW update in groups of one decoder layer (and the
// embedding and final norm as a group of their own) gives exactly — bit for bit — the weights,
// moments and gradient norms of the update in one graph, over three steps.
func TestGroupedUpdateEqualsOneUpdate(t *testing.T) {
	run := func(groupLayers int) ([]float64, map[string][]float32, map[string]*tensors.Tensor, int) {
		cfg := DefaultConfig()
		cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.MicroBatchSize, cfg.UpdateGroupLayers = 1e-2, 0, 0.04, 4, groupLayers
		m, tr, b := qwenTrainer(t, dtypes.Float32, cfg)
		var norms []float64
		for range 3 {
			st, err := tr.Step(b)
			if err != nil {
				t.Fatal(err)
			}
			norms = append(norms, st.GradNorm)
		}
		state, err := tr.OptimizerState()
		if err != nil {
			t.Fatal(err)
		}
		return norms, modelWeights(t, m.Context()), state, len(tr.updateGroups())
	}
	oneN, oneW, oneS, oneG := run(0)
	grN, grW, grS, grG := run(1)
	if oneG != 1 || grG != 4 { // 3 layers + the rest
		t.Fatalf("update groups: %d and %d, want 1 and 4", oneG, grG)
	}
	for i := range oneN {
		if oneN[i] != grN[i] {
			t.Errorf("step %d: gradient norm %v grouped, %v in one update", i+1, grN[i], oneN[i])
		}
	}
	if d := maxWeightDiff(grW, oneW); d != 0 {
		t.Errorf("weights differ by %g", d)
	}
	if len(grS) != len(oneS) {
		t.Fatalf("optimizer state: %d entries grouped, %d in one update", len(grS), len(oneS))
	}
	for k, v := range oneS {
		if k == "step" {
			continue
		}
		a, b := tensors.MustCopyFlatData[float32](grS[k]), tensors.MustCopyFlatData[float32](v)
		for i := range b {
			if a[i] != b[i] {
				t.Fatalf("%s[%d]: %v grouped, %v in one update", k, i, a[i], b[i])
			}
		}
	}
}

// TestMixedPrecision trains the same model from the same float32 weights in float32 and in
// bfloat16 with float32 masters for 5 steps of lr 1e-3: the bfloat16 run tracks the float32
// one — each step's loss within 2e-3 and gradient norm within 3% — since bfloat16 keeps 8
// bits of mantissa (relative rounding 2⁻⁹ ≈ 2e-3 per product input) and the masters carry
// the updates exactly; and its masters, not its rounded weights, are what moved.
func TestMixedPrecision(t *testing.T) {
	run := func(dtype dtypes.DType) ([]Stats, *model.Model, *Trainer) {
		cfg := DefaultConfig()
		cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.MicroBatchSize = 1e-3, 0, 0.04, 4
		m, tr, b := qwenTrainer(t, dtype, cfg)
		var all []Stats
		for range 5 {
			st, err := tr.Step(b)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, st)
		}
		return all, m, tr
	}
	f32, _, f32tr := run(dtypes.Float32)
	bf16, m, bf16tr := run(dtypes.BFloat16)
	for i := range f32 {
		if math.Abs(bf16[i].Loss-f32[i].Loss) > 2e-3 || math.Abs(bf16[i].GradNorm-f32[i].GradNorm) > 0.03*f32[i].GradNorm {
			t.Errorf("step %d: bfloat16 loss %.6f grad norm %.4f, float32 %.6f %.4f", i+1, bf16[i].Loss, bf16[i].GradNorm, f32[i].Loss, f32[i].GradNorm)
		}
	}
	if got, err := f32tr.MasterWeights(); err != nil || len(got) != 0 {
		t.Errorf("float32 training keeps %d master weights (%v), want none", len(got), err)
	}
	masters, err := bf16tr.MasterWeights()
	if err != nil {
		t.Fatal(err)
	}
	var nvars int
	for v := range m.Context().IterVariables() {
		if !v.Trainable {
			continue
		}
		nvars++
		mw, ok := masters[v.ScopeAndName()]
		if !ok {
			t.Fatalf("%s has no master weight", v.ScopeAndName())
		}
		// The variable is its master rounded to the nearest bfloat16 (either one on a tie).
		w, _ := v.Value()
		want, _ := toFloat32(w)
		mf, wf := tensors.MustCopyFlatData[float32](mw), tensors.MustCopyFlatData[float32](want)
		for i := range mf {
			lo := math.Float32frombits(math.Float32bits(mf[i]) &^ 0xffff) // truncated: one neighbour
			hi := math.Float32frombits((math.Float32bits(mf[i]) &^ 0xffff) + 0x10000)
			dlo, dhi := math.Abs(float64(mf[i]-lo)), math.Abs(float64(hi-mf[i]))
			if !(wf[i] == lo && dlo <= dhi) && !(wf[i] == hi && dhi <= dlo) {
				t.Fatalf("%s[%d]: weight %v is not its master %v rounded to the nearest bfloat16 (%v or %v)", v.ScopeAndName(), i, wf[i], mf[i], lo, hi)
			}
		}
	}
	if nvars != len(masters) {
		t.Errorf("%d master weights for %d variables", len(masters), nvars)
	}
}

// TestMastersKeepSmallUpdates: at learning rate 1e-6 AdamW's first step moves each weight by
// about 1e-6, less than half a bfloat16 ulp of every weight of magnitude ≥ 1e-3 (half an ulp
// there is ≥ 2⁻¹⁰·2⁻⁸ ≈ 3.8e-6): bfloat16 weights updated alone (master_dtype bfloat16) keep
// all of those exactly, while float32 masters move (nearly) all of them.
func TestMastersKeepSmallUpdates(t *testing.T) {
	moved := func(masterDType string) (weights, masters, large int) {
		cfg := DefaultConfig()
		cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.MicroBatchSize, cfg.MasterDType = 1e-6, 0, 0, 4, masterDType
		m, tr, b := qwenTrainer(t, dtypes.BFloat16, cfg)
		b.RefLogProbs = nil
		before := bf16Weights(t, m.Context())
		if _, err := tr.Step(b); err != nil {
			t.Fatal(err)
		}
		after := bf16Weights(t, m.Context())
		ms, err := tr.MasterWeights()
		if err != nil {
			t.Fatal(err)
		}
		for name, w := range before {
			var mw []float32
			if ms[name] != nil {
				mw = tensors.MustCopyFlatData[float32](ms[name])
			}
			for i, x := range w {
				if math.Abs(float64(x)) < 1e-3 {
					continue
				}
				large++
				if after[name][i] != x {
					weights++
				}
				if mw != nil && mw[i] != x {
					masters++
				}
			}
		}
		return weights, masters, large
	}
	if w, _, large := moved("bfloat16"); w != 0 || large < 100000 {
		t.Errorf("master_dtype bfloat16: %d of %d bfloat16 weights of magnitude >= 1e-3 moved at lr 1e-6, want 0", w, large)
	}
	w, ms, large := moved("float32")
	if ms < large*99/100 {
		t.Errorf("master_dtype float32: %d of %d master weights of magnitude >= 1e-3 moved at lr 1e-6, want nearly all", ms, large)
	}
	t.Logf("lr 1e-6, weights of magnitude >= 1e-3: %d of %d masters moved; %d bfloat16 weights moved", ms, large, w)
}

// bf16Weights returns every trainable variable of ctx as float32 values, by scope and name.
func bf16Weights(t *testing.T, ctx *context.Context) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for v := range ctx.IterVariables() {
		if !v.Trainable {
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

// modelStages is the Qwen3 model's StagedPolicy (what train passes to SetStagedPolicy).
func modelStages(m *model.Model, temperature float64) StagedPolicy {
	conv := func(in StageInputs) model.StageInputs {
		return model.StageInputs{Prefix: in.Prefix, PrefixMask: in.PrefixMask, Tokens: in.Tokens, AttnMask: in.AttnMask}
	}
	return StagedPolicy{
		Layers: m.NumLayers(),
		Embed:  func(ctx *context.Context, in StageInputs) []*Node { return m.StageEmbed(ctx, conv(in)) },
		Layer: func(ctx *context.Context, i int, state []*Node, in StageInputs) []*Node {
			return m.StageLayer(ctx, i, state, conv(in))
		},
		Head: func(ctx *context.Context, state []*Node, in StageInputs, targetPos *Node) *Node {
			return m.StageHead(ctx, state, conv(in), targetPos, temperature)
		},
	}
}
