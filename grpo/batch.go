// Package grpo trains a policy with turn-wise GRPO (docs/design.md#turn-wise-grpo): group
// advantages per turn and phase, the clipped surrogate with phase masks and a k3 KL penalty,
// and an AdamW trainer with gradient clipping, learning-rate schedules and gradient
// accumulation over micro-batches.
//
// The trainer is model-agnostic: a policy is any GoMLX graph function with the PolicyFn
// signature, whose trainable variables live in a context.Context. The loss is written once,
// as graph code (objective.go); the tests hold a plain-Go twin of the same equations.
package grpo

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// PolicyFn is a policy as a graph function: tokens [B, L] int32 (right-padded), attnMask
// [B, L] int32 (1 = token, 0 = padding), targetPos [B, K] int32 (positions p ∈ [1, L) whose
// token's log-prob is wanted) → [B, K] float32 log π(tokens[b, p] | tokens[b, <p]), computed
// from logits divided by the sampling temperature (see TokenLogProbs). Entries of targetPos
// that do not count may point at padding; their values must still be finite.
type PolicyFn func(ctx *context.Context, tokens, attnMask, targetPos *graph.Node) *graph.Node

// SharedPolicyFn is a policy for rows that all start with the same tokens: prefix [1, P] int32
// (its first n entries are the shared tokens, prefixMask [1, P] int32 says which), then each
// row's own tokens [B, L] (right-padded, attnMask [B, L]); targetPos [B, K] are positions in
// the own tokens (1 ≤ p < L). It must equal PolicyFn on the concatenated rows:
//
//	SharedPolicyFn(prefix, tokens, targetPos) = PolicyFn(prefix[:n] ++ tokens, targetPos + n)
//
// and may compute the prefix once for all rows (model.Model.TokenLogProbsShared does).
type SharedPolicyFn func(ctx *context.Context, prefix, prefixMask, tokens, attnMask, targetPos *graph.Node) *graph.Node

// Phase is the role that produced a completion.
type Phase uint8

// The two phases of the guard loop, and the synthetic language-modelling
// sequences of model pretrain.
const (
	PhaseMemory  Phase = iota // the memory manager's update_memory call
	PhaseJudge                // the judge's assess_risk call
	PhaseContext              // model pretrain only: a synthetic task's sequence (copy, recall)
	NumPhases
)

func (p Phase) String() string {
	switch p {
	case PhaseMemory:
		return "memory"
	case PhaseJudge:
		return "judge"
	case PhaseContext:
		return "context"
	}
	return fmt.Sprintf("Phase(%d)", uint8(p))
}

// Batch is a rollout batch of B sequences, each one memory or judge call (prompt + completion),
// as rectangular arrays. Build it with NewBatch, or directly.
type Batch struct {
	Tokens      [][]int32   // [B][L] prompt followed by completion, right-padded
	AttnMask    [][]int32   // [B][L] 1 = token, 0 = padding
	TargetPos   [][]int32   // [B][K] positions of the completion tokens whose log-probs count; padding entries any p ∈ [1, L)
	LossMask    [][]float32 // [B][K] 1 = the entry is a completion token that counts, 0 = padding
	OldLogProbs [][]float32 // [B][K] log π_old at TargetPos; nil = the current policy (filled by Update when num_iterations > 1)
	RefLogProbs [][]float32 // [B][K] log π_ref at TargetPos; needed only when beta > 0
	// RolloutLogProbs [B][K] are the sampler's log π_rollout at TargetPos, recorded at
	// generation; needed only with a rollout correction.
	RolloutLogProbs [][]float32
	Advantages      []float32 // [B] the advantage of the sequence's own phase: the phase mask
	Phase           []Phase   // [B] the role that produced the completion (diagnostics)
	Rewards         []float32 // [B] the sequence's reward (diagnostics; nil = not reported)
}

// subset returns the batch of rows of b in that order (the rows' slices shared, not copied).
func (b *Batch) subset(rows []int) *Batch {
	return &Batch{
		Tokens: pickRows(b.Tokens, rows), AttnMask: pickRows(b.AttnMask, rows), TargetPos: pickRows(b.TargetPos, rows),
		LossMask: pickRows(b.LossMask, rows), OldLogProbs: pickRows(b.OldLogProbs, rows), RefLogProbs: pickRows(b.RefLogProbs, rows),
		RolloutLogProbs: pickRows(b.RolloutLogProbs, rows),
		Advantages:      pickRows(b.Advantages, rows), Phase: pickRows(b.Phase, rows), Rewards: pickRows(b.Rewards, rows),
	}
}

// pickRows returns x[rows[0]], x[rows[1]], …; nil for a nil x (a field the batch leaves out).
func pickRows[T any](x []T, rows []int) []T {
	if x == nil {
		return nil
	}
	out := make([]T, len(rows))
	for j, i := range rows {
		out[j] = x[i]
	}
	return out
}

// Sequence is one memory or judge call of a rollout.
type Sequence struct {
	Prompt     []int32 // the rendered prompt, at least one token
	Completion []int32 // the sampled completion
	// Forced marks completion tokens that carry no choice (forced by
	// structured decoding): they are neither targets nor in the loss, so the
	// LM head never runs at their positions. nil: every token counts.
	Forced []bool
	// LogProbs are the sampler's log-probs of the completion tokens, one per token (recorded at
	// generation: the local model's or a server's); nil when not known.
	LogProbs  []float32
	Phase     Phase
	Advantage float32 // the advantage of this call's phase, turn and chain
	Reward    float32 // its reward (diagnostics)
}

// chosen returns the indexes of the completion tokens that count.
func (s *Sequence) chosen() []int {
	var ks []int
	for k := range s.Completion {
		if k >= len(s.Forced) || !s.Forced[k] {
			ks = append(ks, k)
		}
	}
	return ks
}

// NewBatch lays sequences out as a Batch: L = the longest prompt + completion, K = the
// most completion tokens that count in one sequence, padding entries of TargetPos set to 1.
// When every sequence carries the sampler's log-probs, they become RolloutLogProbs.
func NewBatch(seqs []Sequence) (*Batch, error) {
	L, K := 2, 1
	withRollout := len(seqs) > 0
	for i, s := range seqs {
		if len(s.Prompt) == 0 {
			return nil, fmt.Errorf("grpo: sequence %d has an empty prompt", i)
		}
		if s.LogProbs != nil && len(s.LogProbs) != len(s.Completion) {
			return nil, fmt.Errorf("grpo: sequence %d has %d completion tokens but %d log-probs", i, len(s.Completion), len(s.LogProbs))
		}
		withRollout = withRollout && s.LogProbs != nil
		L = max(L, len(s.Prompt)+len(s.Completion))
		K = max(K, len(s.chosen()))
	}
	b := &Batch{}
	for _, s := range seqs {
		tokens, attn := make([]int32, L), make([]int32, L)
		n := copy(tokens, s.Prompt)
		copy(tokens[n:], s.Completion)
		for p := range len(s.Prompt) + len(s.Completion) {
			attn[p] = 1
		}
		pos, mask := make([]int32, K), make([]float32, K)
		for k := range K {
			pos[k] = 1 // padding entries: any valid position, masked out
		}
		var rollout []float32
		if withRollout {
			rollout = make([]float32, K)
			b.RolloutLogProbs = append(b.RolloutLogProbs, rollout)
		}
		for j, k := range s.chosen() {
			pos[j], mask[j] = int32(len(s.Prompt)+k), 1
			if withRollout {
				rollout[j] = s.LogProbs[k]
			}
		}
		b.Tokens = append(b.Tokens, tokens)
		b.AttnMask = append(b.AttnMask, attn)
		b.TargetPos = append(b.TargetPos, pos)
		b.LossMask = append(b.LossMask, mask)
		b.Advantages = append(b.Advantages, s.Advantage)
		b.Phase = append(b.Phase, s.Phase)
		b.Rewards = append(b.Rewards, s.Reward)
	}
	return b, nil
}

// Len returns the number of sequences B.
func (b *Batch) Len() int { return len(b.Tokens) }

func finite32(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }

// validate checks shapes and values; needRef and needRollout say whether those log-probs
// must be set.
func (b *Batch) validate(needRef, needRollout bool) error {
	B := b.Len()
	if B == 0 {
		return fmt.Errorf("empty batch")
	}
	if len(b.AttnMask) != B || len(b.TargetPos) != B || len(b.LossMask) != B || len(b.Advantages) != B || len(b.Phase) != B {
		return fmt.Errorf("batch fields disagree on the number of sequences: tokens %d, attn_mask %d, target_pos %d, loss_mask %d, advantages %d, phase %d",
			B, len(b.AttnMask), len(b.TargetPos), len(b.LossMask), len(b.Advantages), len(b.Phase))
	}
	if b.Rewards != nil && len(b.Rewards) != B {
		return fmt.Errorf("batch has %d sequences but %d rewards", B, len(b.Rewards))
	}
	if b.OldLogProbs != nil && len(b.OldLogProbs) != B {
		return fmt.Errorf("batch has %d sequences but %d rows of old log-probs", B, len(b.OldLogProbs))
	}
	if needRef && len(b.RefLogProbs) != B {
		return fmt.Errorf("beta > 0 needs reference log-probs for all %d sequences, got %d rows", B, len(b.RefLogProbs))
	}
	if needRollout && len(b.RolloutLogProbs) != B {
		return fmt.Errorf("a rollout correction needs the sampler's log-probs for all %d sequences, got %d rows", B, len(b.RolloutLogProbs))
	}
	L, K := len(b.Tokens[0]), len(b.TargetPos[0])
	for i := range B {
		if len(b.Tokens[i]) != L || len(b.AttnMask[i]) != L {
			return fmt.Errorf("sequence %d: tokens/attn_mask have lengths %d/%d, want %d", i, len(b.Tokens[i]), len(b.AttnMask[i]), L)
		}
		if len(b.TargetPos[i]) != K || len(b.LossMask[i]) != K {
			return fmt.Errorf("sequence %d: target_pos/loss_mask have lengths %d/%d, want %d", i, len(b.TargetPos[i]), len(b.LossMask[i]), K)
		}
		if b.Phase[i] >= NumPhases {
			return fmt.Errorf("sequence %d: unknown phase %d", i, b.Phase[i])
		}
		if !finite32(b.Advantages[i]) {
			return fmt.Errorf("sequence %d: advantage is %v", i, b.Advantages[i])
		}
		if b.AttnMask[i][0] != 1 {
			return fmt.Errorf("sequence %d: attn_mask[0] must be 1 (right padding, non-empty prompt)", i)
		}
		for k := range K {
			m, p := b.LossMask[i][k], b.TargetPos[i][k]
			if m != 0 && m != 1 {
				return fmt.Errorf("sequence %d token %d: loss_mask must be 0 or 1, got %v", i, k, m)
			}
			if p < 1 || int(p) >= L {
				return fmt.Errorf("sequence %d token %d: target_pos %d outside [1, %d)", i, k, p, L)
			}
			if m == 0 {
				continue
			}
			if b.AttnMask[i][p] != 1 {
				return fmt.Errorf("sequence %d token %d: target_pos %d is padding", i, k, p)
			}
			if b.OldLogProbs != nil && (len(b.OldLogProbs[i]) != K || !finite32(b.OldLogProbs[i][k])) {
				return fmt.Errorf("sequence %d token %d: old log-prob missing or not finite", i, k)
			}
			if needRef && (len(b.RefLogProbs[i]) != K || !finite32(b.RefLogProbs[i][k])) {
				return fmt.Errorf("sequence %d token %d: reference log-prob missing or not finite", i, k)
			}
			if needRollout && (len(b.RolloutLogProbs[i]) != K || !finite32(b.RolloutLogProbs[i][k]) || b.RolloutLogProbs[i][k] > 0) {
				return fmt.Errorf("sequence %d token %d: the sampler's log-prob is missing, not finite or above 0", i, k)
			}
		}
	}
	return nil
}
