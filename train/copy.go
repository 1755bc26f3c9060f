package train

// Copy pretraining: a synthetic language-modelling task that teaches a
// random model to copy what it has read.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/model"
)

// CopyConfig is the copying task of `mageguard model pretrain`.
type CopyConfig struct {
	Steps  int    // optimizer steps
	Batch  int    // sequences a step
	Length int    // random tokens a sequence, written twice
	Seed   uint64 // the token draws
}

// DefaultCopyConfig returns the defaults: 300 steps of 32 sequences of 20
// tokens (configs/synth-learn.yaml's model copies after ~150: docs/learning.md).
func DefaultCopyConfig() CopyConfig { return CopyConfig{Steps: 300, Batch: 32, Length: 20, Seed: 1} }

// Validate checks the values; errors name the flag.
func (c CopyConfig) Validate() error {
	switch {
	case c.Steps < 1:
		return fmt.Errorf("--steps must be >= 1, got %d", c.Steps)
	case c.Batch < 1:
		return fmt.Errorf("--batch must be >= 1, got %d", c.Batch)
	case c.Length < 1:
		return fmt.Errorf("--length must be >= 1, got %d", c.Length)
	}
	return nil
}

// CopyStep is one step's line of the copy task's log.
type CopyStep struct {
	Step     int
	Loss     float64 // cross-entropy of the second copy's tokens (nats per token): 0 copies perfectly, ln(#ids) knows nothing
	GradNorm float64
	Seconds  float64
}

// PretrainCopy trains the model of o.Model (a random one, or model.path)
// on the copying task and saves it to out as a checkpoint with the
// tokenizer's files. Each sequence is the tokenizer's <|endoftext|> (or id
// 0), then Length tokens drawn uniformly from the ids that are not added
// tokens, then the same tokens again; only the second copy is in the loss,
// so its cross-entropy says how well the model copies. This is the ability
// that a pretrained LLM brings to the memory manager's job — write down a
// name it has read — and that a random tiny model learns only slowly from
// the guard's completions (docs/learning.md). The optimizer is grpo's AdamW
// with o.GRPO's learning rate, warm-up, clipping and micro-batches (a
// constant schedule after warm-up), token-mean loss. onStep, when set, gets
// every step. Cancelling ctx stops it without writing out.
func PretrainCopy(ctx context.Context, o Options, c CopyConfig, out string, onStep func(CopyStep)) error {
	if err := c.Validate(); err != nil {
		return err
	}
	m, tok, err := o.Model.Open()
	if err != nil {
		return err
	}
	tokDir := o.Model.TokenizerDir()
	var pool []int32
	for id := range tok.VocabSize() {
		if !tok.IsAdded(id) {
			pool = append(pool, int32(id))
		}
	}
	if len(pool) < 2 {
		return fmt.Errorf("the tokenizer %s has %d ids that are not added tokens, want >= 2", tokDir, len(pool))
	}
	start := int32(0)
	if id, ok := tok.TokenID("<|endoftext|>"); ok {
		start = int32(id)
	}
	g := o.GRPO
	g.Beta, g.NumIterations, g.LRSchedule, g.LossAggregation = 0, 1, "constant", grpo.AggTokenMean
	policy := func(ctx *mlctx.Context, tokens, attnMask, targetPos *graph.Node) *graph.Node {
		return m.TokenLogProbs(ctx, tokens, attnMask, targetPos, 1)
	}
	tr, err := grpo.NewTrainer(m.Backend(), m.Context(), policy, g, c.Steps)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x636f7079))
	for step := 1; step <= c.Steps; step++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stopped at step %d of %d, nothing written: %w", step-1, c.Steps, err)
		}
		t0 := time.Now()
		b, err := grpo.NewBatch(copySequences(rng, pool, start, c.Batch, c.Length))
		if err != nil {
			return err
		}
		stats, err := tr.Update(b)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		st := stats[len(stats)-1]
		if math.IsNaN(st.Entropy) || math.IsInf(st.Entropy, 0) {
			return fmt.Errorf("step %d: loss %v", step, st.Entropy)
		}
		if onStep != nil {
			onStep(CopyStep{Step: step, Loss: st.Entropy, GradNorm: st.GradNorm, Seconds: time.Since(t0).Seconds()})
		}
	}
	return m.Save(out, model.SaveOptions{DType: o.Model.DType, TokenizerDir: tokDir})
}

// copySequences draws n sequences of the copying task: prompt start and
// length tokens from pool, completion the same tokens.
func copySequences(rng *rand.Rand, pool []int32, start int32, n, length int) []grpo.Sequence {
	seqs := make([]grpo.Sequence, n)
	for i := range seqs {
		x := make([]int32, length)
		for k := range x {
			x[k] = pool[rng.IntN(len(pool))]
		}
		seqs[i] = grpo.Sequence{Prompt: append([]int32{start}, x...), Completion: x, Advantage: 1, Phase: grpo.PhaseContext}
	}
	return seqs
}
