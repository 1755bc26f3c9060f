package grpo

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph code reads as equations
)

// objective holds the graph nodes of the turn-wise GRPO loss of one micro-batch.
type objective struct {
	Loss *Node // scalar: this micro-batch's share of the step's loss (shares sum to the full-batch loss)

	// Per sequence [B], sums over the sequence's counted tokens (diagnostics).
	SeqRatio   *Node // Σ_k m ρ_k
	SeqKL      *Node // Σ_k m KL_k (zero when there is no reference)
	SeqClipped *Node // Σ_k m [the clipped term is the active one]
	SeqNegLogP *Node // Σ_k m (−log π_θ): with sampled tokens, an estimate of the entropy
}

// buildObjective builds the loss of docs/design.md#turn-wise-grpo for one micro-batch, in the dtype
// of logp. Shapes: logp, old, ref, mask [B, K]; adv [B]; denom a scalar. ref may be nil
// (then β must be 0). For sequence b and completion token k, with m the loss mask:
//
//	ρ_k    = exp(log π_θ − log π_old)
//	obj_k  = min(ρ_k A_b, clip(ρ_k, 1−ε, 1+ε) A_b) − β KL_k
//	KL_k   = exp(log π_ref − log π_θ) − (log π_ref − log π_θ) − 1          (k3 estimator)
//	ℓ_k    = −obj_k
//
//	seq-mean-token-mean:  loss = (1/denom) Σ_b (Σ_k m ℓ_k) / max(1, Σ_k m)   denom = sequences with a counted token in the step
//	token-mean:           loss = (1/denom) Σ_b Σ_k m ℓ_k                     denom = counted tokens in the step
//
// Because denom counts the whole optimizer step (not this micro-batch), the micro-batch losses
// — and their gradients — sum to the full-batch ones. Each sequence carries its own phase's
// advantage A_b (the phase mask); padding tokens and padding rows have m = 0.
func buildObjective(cfg Config, logp, old, ref, mask, adv, denom *Node) objective {
	dtype := logp.DType()
	g := logp.Graph()
	as := func(x *Node) *Node {
		if x.DType() != dtype {
			return ConvertDType(x, dtype)
		}
		return x
	}
	mask, adv, denom, old = as(mask), as(adv), as(denom), as(old)
	counted := GreaterThan(mask, ScalarZero(g, dtype)) // [B, K] bool
	zero := ScalarZero(g, dtype)

	// Differences are taken only where m = 1, so padding can never produce Inf/NaN (nor
	// their gradients).
	logRatio := Where(counted, Sub(logp, old), zero) // [B, K]
	ratio := Exp(logRatio)                           // ρ_k
	A := InsertAxes(adv, -1)                         // [B, 1]
	eps := cfg.ClipEpsilon
	unclipped := Mul(ratio, A)                                     // ρ_k A
	clipped := Mul(ClipScalar(ratio, 1-eps, 1+eps), A)             // clip(ρ_k) A
	surrogate := Min(unclipped, clipped)                           // [B, K]
	isClipped := ConvertDType(LessThan(clipped, unclipped), dtype) // the clipped term is active: no gradient

	perToken := Neg(surrogate) // ℓ_k
	kl := ZerosLike(logp)
	if ref != nil {
		d := Where(counted, Sub(as(ref), logp), zero) // log π_ref − log π_θ
		kl = Sub(Sub(Exp(d), d), ScalarOne(g, dtype)) // k3
		if cfg.Beta != 0 {
			perToken = Add(perToken, MulScalar(kl, cfg.Beta))
		}
	}

	seqSum := func(x *Node) *Node { return ReduceSum(Mul(x, mask), -1) } // [B]
	var loss *Node
	if cfg.LossAggregation == AggTokenMean {
		loss = Div(ReduceAllSum(Mul(perToken, mask)), denom)
	} else {
		seqTokens := MaxScalar(ReduceSum(mask, -1), 1) // max(1, Σ_k m)
		loss = Div(ReduceAllSum(Div(seqSum(perToken), seqTokens)), denom)
	}
	return objective{
		Loss:       loss,
		SeqRatio:   seqSum(ratio),
		SeqKL:      seqSum(kl),
		SeqClipped: seqSum(isClipped),
		SeqNegLogP: seqSum(Where(counted, Neg(logp), zero)),
	}
}

// TokenLogProbs returns log softmax(logits / temperature) at the target ids: the log-probs of
// the distribution the sampler drew from (docs/design.md#turn-wise-grpo). logits is [B, K, V], targets [B, K]
// (integer ids); the result is [B, K] in the dtype of logits. A PolicyFn can end with it.
func TokenLogProbs(logits, targets *Node, temperature float64) *Node {
	if temperature != 1 {
		logits = DivScalar(logits, temperature)
	}
	logp := LogSoftmax(logits, -1)                                    // [B, K, V]
	oneHot := OneHot(targets, logits.Shape().Dim(-1), logits.DType()) // [B, K, V]
	return ReduceSum(Mul(logp, oneHot), -1)                           // [B, K]
}

// float32 is the dtype of the trainer's inputs and optimizer state.
const float32DType = dtypes.Float32
