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
	score, err := m.Score(&model.ScoreInput{Sequences: full, MaxNewTokens: 1, NLastLogits: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		for k := range s.Completion {
			want := score.Sequences[i].NextTokenLogprobs[len(s.Prompt)+k-1]
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
// queries). The losses, gradient norms and reference log-probs agree
// within 1e-5 relative, and every weight after the steps within 1e-7 (with Adam's ε = 1 the
// updates are lr times the gradients' moving averages, so that is the gradients agreeing to
// ~1e-5 of lr).
func TestSavingsChangeNothing(t *testing.T) {
	type savings struct{ chunk, shared, blocked bool }
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
		tr, err := NewTrainer(backend(t), m.Context(), func(ctx *context.Context, tokens, attn, pos *Node) *Node {
			return m.TokenLogProbs(ctx, tokens, attn, pos, 0.9)
		}, cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		tr.SetSharedPolicy(func(ctx *context.Context, prefix, prefixMask, tokens, attn, pos *Node) *Node {
			return m.TokenLogProbsShared(ctx, prefix, prefixMask, tokens, attn, pos, 0.9)
		})
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
	for _, s := range []savings{{chunk: true}, {shared: true}, {blocked: true}, {chunk: true, shared: true, blocked: true}} {
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
