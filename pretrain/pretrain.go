// Package pretrain is copy pretraining (`mageguard model pretrain`): a
// synthetic language-modelling task that teaches a random model to copy
// what it has read, by what it is, before the guard is trained on it
// (mageguard sft). It uses grpo's trainer with advantage 1, so the loss is
// the cross-entropy of the tokens to copy.
package pretrain

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/checkpoint"
)

// Config is the synthetic task of `mageguard model pretrain`.
type Config struct {
	Task       string // TaskCopy (the default; "" too) or TaskRecall
	Steps      int    // optimizer steps
	FixedSteps int    // TaskCopy: the first steps copy Length tokens, the later ones 2…Length
	Batch      int    // sequences a step
	Length     int    // TaskCopy: the most random tokens a sequence (written twice); TaskRecall: the most pairs
	Seed       uint64 // the token draws
}

// The tasks of `mageguard model pretrain --task`.
const (
	// TaskCopy: random tokens written twice, the loss on the second copy —
	// the memory manager's skill of writing down what it read, and the
	// judge's of finding what follows an earlier occurrence of a token.
	// It is a curriculum: for FixedSteps steps every sequence has Length
	// tokens, so the token to predict is always Length back, which a
	// random model learns within ~150 steps (one head that looks back a
	// fixed distance, and the copy of what it sees); then each sequence
	// has 2…Length tokens, so only the token's own earlier occurrence
	// tells where to look — content-based induction, which then forms
	// within ~150 more steps. A random model trained on variable lengths
	// alone, or on associative recall alone, had not learned it after
	// 500 and 3,000 steps (docs/learning.md).
	TaskCopy = "copy"
	// TaskRecall: associative recall, the check that a model has
	// content-based induction. 2…Length pairs of a key and a value
	// (distinct random keys, random values), then every key again in a
	// random order, each followed by its value; the loss is on those values
	// alone: the token after the current token's earlier occurrence, at an
	// offset that varies. The judge's lookup is this: after it writes the
	// pending action's target, the role that follows the target in the
	// memory.
	TaskRecall = "recall"
)

// DefaultConfig returns the defaults: 500 steps of 32 sequences of up to
// 20 tokens, the first 200 of 20 (configs/synth-learn.yaml's model copies
// content-based after ~350: docs/learning.md).
func DefaultConfig() Config {
	return Config{Task: TaskCopy, Steps: 500, FixedSteps: 200, Batch: 32, Length: 20, Seed: 1}
}

// Validate checks the values; errors name the flag.
func (c Config) Validate() error {
	switch {
	case c.Task != "" && c.Task != TaskCopy && c.Task != TaskRecall:
		return fmt.Errorf("--task must be %s or %s, got %q", TaskCopy, TaskRecall, c.Task)
	case c.Steps < 1:
		return fmt.Errorf("--steps must be >= 1, got %d", c.Steps)
	case c.FixedSteps < 0:
		return fmt.Errorf("--fixed-steps must be >= 0, got %d", c.FixedSteps)
	case c.Batch < 1:
		return fmt.Errorf("--batch must be >= 1, got %d", c.Batch)
	case c.Length < 2:
		return fmt.Errorf("--length must be >= 2, got %d", c.Length)
	}
	return nil
}

// Step is one step's line of the task's log.
type Step struct {
	Step     int
	Loss     float64 // cross-entropy of the tokens in the loss (the second copy; recall's values), nats per token: 0 always right, ln(#ids) knows nothing
	GradNorm float64
	Seconds  float64
}

// Run trains the model of ms (a random one, or model.path) on the task
// of c and saves it to out as a checkpoint with the tokenizer's
// files. Each copying sequence is the tokenizer's <|endoftext|> (or id 0),
// then Length tokens (2…Length after FixedSteps steps) drawn uniformly from
// the ids that are not added tokens, then the same tokens again; only the
// second copy is in the loss, so its cross-entropy says how well the model
// copies (TaskRecall: see there). This is the ability that a pretrained LLM
// brings to the guard — write down a name it has read, find what followed
// an earlier occurrence of a name — and that a random tiny model does not
// learn from the guard's completions in hundreds of steps
// (docs/learning.md). The optimizer is grpo's AdamW
// with g's learning rate, warm-up, clipping and micro-batches (a constant
// schedule after warm-up), token-mean loss. onStep, when set, gets every
// step. Cancelling ctx stops it without writing out.
func Run(ctx context.Context, ms model.Settings, g grpo.Config, c Config, out string, onStep func(Step)) error {
	if err := c.Validate(); err != nil {
		return err
	}
	m, tok, err := ms.Open()
	if err != nil {
		return err
	}
	tokDir := ms.TokenizerDir()
	tokFiles, err := checkpoint.ReadTokenizerFiles(tokDir) // the checkpoint's, whatever happens to tokDir meanwhile
	if err != nil {
		return fmt.Errorf("model.tokenizer: %w", err)
	}
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
		var seqs []grpo.Sequence
		switch {
		case c.Task == TaskRecall:
			seqs = recallSequences(rng, pool, start, c.Batch, c.Length)
		case step <= c.FixedSteps:
			seqs = copySequences(rng, pool, start, c.Batch, c.Length, c.Length)
		default:
			seqs = copySequences(rng, pool, start, c.Batch, 2, c.Length)
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
			onStep(Step{Step: step, Loss: st.Entropy, GradNorm: st.GradNorm, Seconds: time.Since(t0).Seconds()})
		}
	}
	return m.Save(out, model.SaveOptions{DType: ms.DType, Tokenizer: tokFiles})
}

// copySequences draws n sequences of the copying task: prompt start and
// lo…hi tokens from pool (uniform), completion the same tokens.
func copySequences(rng *rand.Rand, pool []int32, start int32, n, lo, hi int) []grpo.Sequence {
	seqs := make([]grpo.Sequence, n)
	for i := range seqs {
		x := make([]int32, lo+rng.IntN(hi-lo+1))
		for k := range x {
			x[k] = pool[rng.IntN(len(pool))]
		}
		seqs[i] = grpo.Sequence{Prompt: append([]int32{start}, x...), Completion: x, Advantage: 1, Phase: grpo.PhaseContext}
	}
	return seqs
}

// recallSequences draws n sequences of the associative-recall task
// (TaskRecall): prompt start and 2…pairs (key, value) pairs, the keys
// distinct; completion the keys again in a random order, each followed by
// its value, the keys forced (no loss).
func recallSequences(rng *rand.Rand, pool []int32, start int32, n, pairs int) []grpo.Sequence {
	seqs := make([]grpo.Sequence, n)
	for i := range seqs {
		m := 2 + rng.IntN(pairs-1)
		keys := rng.Perm(len(pool))[:m]
		values := make([]int32, m)
		prompt := []int32{start}
		for k, key := range keys {
			values[k] = pool[rng.IntN(len(pool))]
			prompt = append(prompt, pool[key], values[k])
		}
		var completion []int32
		var forced []bool
		for _, k := range rng.Perm(m) {
			completion = append(completion, pool[keys[k]], values[k])
			forced = append(forced, true, false)
		}
		seqs[i] = grpo.Sequence{Prompt: prompt, Completion: completion, Forced: forced, Advantage: 1, Phase: grpo.PhaseContext}
	}
	return seqs
}
