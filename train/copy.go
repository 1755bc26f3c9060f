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
	Task   string // TaskCopy (the default; "" too) or TaskLookup
	Steps  int    // optimizer steps
	Batch  int    // sequences a step
	Length int    // random tokens a sequence, written twice
	Seed   uint64 // the token draws
}

// The tasks of `mageguard model pretrain --task`.
const (
	// TaskCopy: Length random tokens written twice, the loss on the second
	// copy — the memory manager's skill of writing down a name it read.
	TaskCopy = "copy"
	// TaskLookup: two short lists of distinct random tokens, each after its
	// own marker token; then Length random tokens among which a query
	// token, from one of the lists, follows a third marker; then an ask
	// token, and the loss on one token: the marker of the list the query is
	// in — the judge's skill of finding the pending action's target in the
	// memory and seeing which list holds it (a two-hop lookup).
	TaskLookup = "lookup"
)

// DefaultCopyConfig returns the defaults: 300 steps of 32 sequences of 20
// tokens (configs/synth-learn.yaml's model copies after ~150: docs/learning.md).
func DefaultCopyConfig() CopyConfig {
	return CopyConfig{Task: TaskCopy, Steps: 300, Batch: 32, Length: 20, Seed: 1}
}

// Validate checks the values; errors name the flag.
func (c CopyConfig) Validate() error {
	switch {
	case c.Task != "" && c.Task != TaskCopy && c.Task != TaskLookup:
		return fmt.Errorf("--task must be %s or %s, got %q", TaskCopy, TaskLookup, c.Task)
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
	if len(pool) < 16 {
		return fmt.Errorf("the tokenizer %s has %d ids that are not added tokens, want >= 16", tokDir, len(pool))
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
		seqs := copySequences(rng, pool, start, c.Batch, c.Length)
		if c.Task == TaskLookup {
			seqs = lookupSequences(rng, pool, start, c.Batch, c.Length)
		}
		b, err := grpo.NewBatch(seqs)
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

// lookupSequences draws n sequences of the lookup task (TaskLookup). The
// four marker tokens are pool's first four ids (list A, list B, query,
// ask); list tokens, filler and query come from the rest, every list token
// distinct and absent from the filler. The completion is one token: the
// marker of the query's list.
func lookupSequences(rng *rand.Rand, pool []int32, start int32, n, length int) []grpo.Sequence {
	markA, markB, markQ, ask := pool[0], pool[1], pool[2], pool[3]
	rest := pool[4:]
	seqs := make([]grpo.Sequence, n)
	for i := range seqs {
		na, nb := 1+rng.IntN(4), 1+rng.IntN(4)
		perm := rng.Perm(len(rest))
		lists := make([]int32, na+nb)
		for k := range lists {
			lists[k] = rest[perm[k]]
		}
		a, b := lists[:na], lists[na:]
		inA := rng.IntN(2) == 0
		q, answer := b[rng.IntN(nb)], markB
		if inA {
			q, answer = a[rng.IntN(na)], markA
		}
		filler := make([]int32, length)
		for k := range filler {
			filler[k] = rest[perm[na+nb+rng.IntN(len(rest)-na-nb)]]
		}
		at := rng.IntN(length + 1)
		prompt := []int32{start, markA}
		prompt = append(prompt, a...)
		prompt = append(prompt, markB)
		prompt = append(prompt, b...)
		prompt = append(prompt, filler[:at]...)
		prompt = append(prompt, markQ, q)
		prompt = append(prompt, filler[at:]...)
		prompt = append(prompt, ask)
		seqs[i] = grpo.Sequence{Prompt: prompt, Completion: []int32{answer}, Advantage: 1, Phase: grpo.PhaseContext}
	}
	return seqs
}
