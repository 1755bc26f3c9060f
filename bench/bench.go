// Package bench times what a real run does, on random data, with a real
// model: one turn-wise GRPO optimizer step on micro-batches shaped like the
// guard's (rows of one role sharing a system prompt, the completion at the
// end of each row), and batched decoding with the KV cache. It is what
// `mageguard model bench` runs and what the GPU check (scripts/gpu-check.sh)
// times on a GPU, where no Go toolchain is at hand; on the pure-Go backend
// it also records the peak Go heap (heapstat.Sampler), which is what
// `mageguard plan`'s formulas are checked against.
package bench

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/internal/heapstat"
	"github.com/mageguard/mageguard/model"
)

// TrainShape is the shape of a benchmark training step: Rows sequences of
// one role, each starting with the same PrefixTokens tokens (a system
// prompt), then RowTokens tokens of its own whose last TargetTokens are the
// completion in the loss.
type TrainShape struct {
	Rows         int `json:"rows"`          // sequences in the step (grpo.micro_batch_size of them per micro-batch)
	PrefixTokens int `json:"prefix_tokens"` // tokens every row starts with (0 = none)
	RowTokens    int `json:"row_tokens"`    // tokens of each row after the prefix, the completion included
	TargetTokens int `json:"target_tokens"` // completion tokens of each row (the LM head's positions), ≤ RowTokens-1
}

// Validate checks the shape; errors name the field.
func (s TrainShape) Validate() error {
	switch {
	case s.Rows < 1:
		return fmt.Errorf("rows must be >= 1, got %d", s.Rows)
	case s.PrefixTokens < 0:
		return fmt.Errorf("prefix tokens must be >= 0, got %d", s.PrefixTokens)
	case s.RowTokens < 2:
		return fmt.Errorf("row tokens must be >= 2, got %d", s.RowTokens)
	case s.TargetTokens < 1 || s.TargetTokens > s.RowTokens-1:
		return fmt.Errorf("target tokens must be in [1, row tokens - 1 = %d], got %d", s.RowTokens-1, s.TargetTokens)
	}
	return nil
}

// Tokens is the number of tokens one step reads: every row's prefix and own tokens.
func (s TrainShape) Tokens() int { return s.Rows * (s.PrefixTokens + s.RowTokens) }

// TrainResult is what TrainStep measured.
type TrainResult struct {
	Shape           TrainShape `json:"shape"`
	Steps           int        `json:"steps"`             // timed steps (after one untimed warm-up step that compiles)
	Seconds         float64    `json:"seconds"`           // mean wall time of a timed step
	TokensPerSecond float64    `json:"tokens_per_second"` // Shape.Tokens() / Seconds
	FLOPs           float64    `json:"flops"`             // model FLOPs of one step (TrainFLOPs)
	FLOPsPerSecond  float64    `json:"flops_per_second"`
	Loss            float64    `json:"loss"` // of the last step (finite: the step really ran)
	// The Go heap (pure-Go backend: the tensors' memory): live bytes after
	// the warm-up step with its state allocated, and the peaks of the
	// object bytes and of the live bytes (heapstat.Sampler) during the timed
	// steps. Zero unless TrainOptions.Heap.
	HeapBaseBytes     uint64 `json:"heap_base_bytes,omitempty"`
	HeapPeakBytes     uint64 `json:"heap_peak_bytes,omitempty"`
	HeapLivePeakBytes uint64 `json:"heap_live_peak_bytes,omitempty"`
}

// TrainOptions are the knobs of TrainStep.
type TrainOptions struct {
	Steps       int     // timed steps (>= 1)
	Temperature float64 // the log-probs' temperature (rollout.temperature); 0 = 1
	Seed        uint64  // of the random tokens and advantages
	Heap        bool    // sample the Go heap during the timed steps (pure-Go backend)
	// Reference, when set, is the frozen reference policy's context
	// (grpo.FrozenCopy of the starting model): with cfg.Beta > 0 the step
	// needs its log-probs, computed before the timed steps.
	Reference *mlctx.Context
}

// TrainStep builds a trainer of m with cfg (turn-wise GRPO and AdamW, the
// shared-prefix policy of train when cfg.SharedPrefix), feeds it one random
// batch of shape s, takes one untimed step (compilation, optimizer state)
// and then opts.Steps timed ones. The weights of m change.
func TrainStep(m *model.Model, cfg grpo.Config, s TrainShape, opts TrainOptions) (*TrainResult, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("bench: train shape: %w", err)
	}
	if opts.Steps < 1 {
		return nil, fmt.Errorf("bench: steps must be >= 1, got %d", opts.Steps)
	}
	if cfg.Beta > 0 && opts.Reference == nil {
		return nil, fmt.Errorf("bench: grpo.beta %g needs a reference context", cfg.Beta)
	}
	temperature := opts.Temperature
	if temperature == 0 {
		temperature = 1
	}
	policy := func(ctx *mlctx.Context, tokens, attn, pos *graph.Node) *graph.Node {
		return m.TokenLogProbs(ctx, tokens, attn, pos, temperature)
	}
	tr, err := grpo.NewTrainer(m.Backend(), m.Context(), policy, cfg, opts.Steps+1)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	tr.SetSharedPolicy(func(ctx *mlctx.Context, prefix, prefixMask, tokens, attn, pos *graph.Node) *graph.Node {
		return m.TokenLogProbsShared(ctx, prefix, prefixMask, tokens, attn, pos, temperature)
	})
	b, err := randomBatch(s, m.Config().VocabSize, opts.Seed)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if cfg.Beta > 0 {
		if b.RefLogProbs, err = tr.LogProbs(opts.Reference, b); err != nil {
			return nil, fmt.Errorf("bench: reference log-probs: %w", err)
		}
	}
	if _, err := tr.Step(b); err != nil { // compiles, creates the optimizer state
		return nil, fmt.Errorf("bench: warm-up step: %w", err)
	}
	res := &TrainResult{Shape: s, Steps: opts.Steps, FLOPs: TrainFLOPs(m.Config(), s)}
	var heap heapstat.Sampler
	if opts.Heap {
		res.HeapBaseBytes = heapstat.LiveBytes()
		heap.Start()
	}
	t0 := time.Now()
	for range opts.Steps {
		st, err := tr.Step(b)
		if err != nil {
			if opts.Heap {
				heap.Stop()
			}
			return nil, fmt.Errorf("bench: %w", err)
		}
		res.Loss = st.Loss
	}
	res.Seconds = time.Since(t0).Seconds() / float64(opts.Steps)
	if opts.Heap {
		res.HeapPeakBytes = heap.Stop()
		res.HeapLivePeakBytes = heap.LivePeak()
	}
	res.TokensPerSecond = float64(s.Tokens()) / res.Seconds
	res.FLOPsPerSecond = res.FLOPs / res.Seconds
	return res, nil
}

// randomBatch returns s.Rows sequences of one phase sharing a random
// prefix, each with random own tokens, its last s.TargetTokens the
// completion, and a random non-zero advantage.
func randomBatch(s TrainShape, vocab int, seed uint64) (*grpo.Batch, error) {
	rng := rand.New(rand.NewPCG(seed, 0x6265_6e63_68))
	token := func() int32 { return int32(rng.IntN(vocab)) }
	prefix := make([]int32, s.PrefixTokens)
	for i := range prefix {
		prefix[i] = token()
	}
	seqs := make([]grpo.Sequence, s.Rows)
	for r := range seqs {
		q := &seqs[r]
		q.Phase = grpo.PhaseMemory
		q.Advantage = float32(rng.NormFloat64())
		q.Prompt = append([]int32(nil), prefix...)
		for range s.RowTokens - s.TargetTokens {
			q.Prompt = append(q.Prompt, token())
		}
		for range s.TargetTokens {
			q.Completion = append(q.Completion, token())
		}
	}
	return grpo.NewBatch(seqs)
}

// TrainFLOPs is the model FLOPs of one training step of shape s (the
// convention of model FLOP utilisation: forward + backward = 3 × forward,
// recomputation not counted): the decoder's matrix products over every
// token it runs — the shared prefix once, each row's own tokens — with
// attention over all the keys a row sees (the graph computes the masked
// scores too), and the LM head at the target positions only.
func TrainFLOPs(c *model.Config, s TrainShape) float64 {
	_, perLayer, _ := c.ParameterGroups()
	L := float64(c.NumHiddenLayers)
	P, T, R, K := float64(s.PrefixTokens), float64(s.RowTokens), float64(s.Rows), float64(s.TargetTokens)
	attn := 4 * float64(c.NumAttentionHeads*c.HeadDim) // Q·Kᵀ and P·V: 2 × 2 FLOPs per (query, key, head channel)
	prefix := L * (2*float64(perLayer)*P + attn*P*P)
	rows := R * L * (2*float64(perLayer)*T + attn*T*(P+T))
	head := R * K * 2 * float64(c.VocabSize) * float64(c.HiddenSize)
	return 3 * (prefix + rows + head)
}
