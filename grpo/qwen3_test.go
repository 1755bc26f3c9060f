package grpo

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
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
