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
	SeqClipped *Node // Σ_k m [the clip is active: the clipped term (grpo, dapo, gspo) or the truncation (cispo)]
	SeqNegLogP *Node // Σ_k m (−log π_θ): with sampled tokens, an estimate of the entropy

	// With a rollout correction (nil otherwise), per sequence [B]:
	SeqWeight    *Node // Σ_k m c_k
	SeqWeightMax *Node // max_k m c_k
	SeqMasked    *Node // Σ_k m [c_k = 0]
	SeqRolloutKL *Node // Σ_k m (r_k − 1 − log r_k), r_k = π_old/π_rollout: k3 of KL(π_rollout ‖ π_old)

	PerToken *Node // [B, K] ℓ_k before aggregation (any value where m = 0)
}

// objectiveInputs are the objective's inputs: logp, old, ref, rollout, mask [B, K]; adv [B];
// denom a scalar. ref may be nil (then β must be 0); rollout may be nil (then the config must
// have no rollout correction). old carries no gradient (an input, or sg(logp) when μ = 1).
type objectiveInputs struct {
	logp, old, ref, rollout, mask, adv, denom *Node
}

// buildObjective builds the loss of docs/design.md#turn-wise-grpo for one micro-batch, in the dtype
// of logp. For sequence b and completion token k, with m the loss mask:
//
//	ρ_k    = exp(log π_θ − log π_old)
//	grpo, dapo: obj_k = min(ρ_k A_b, clip(ρ_k, 1−ε, 1+ε_high) A_b)
//	gspo:       s_b   = exp((1/Σ_k m) Σ_k m (log π_θ − log π_old))
//	            obj_k = min(s_b A_b, clip(s_b, 1−ε, 1+ε_high) A_b)           every token of b
//	cispo:      obj_k = sg(min(ρ_k, 1+ε_high)) · A_b · log π_θ(y_k)
//
//	c_k    = 1 without a rollout correction; else, with r_k = exp(log π_old − log π_rollout) (token)
//	         or r = exp(Σ_k m (log π_old − log π_rollout)) for all of b's tokens (sequence):
//	         tis: min(r, C);  mis: [1/C ≤ r ≤ C];  a constant (no gradient)
//	KL_k   = exp(log π_ref − log π_θ) − (log π_ref − log π_θ) − 1          (k3 estimator)
//	ℓ_k    = −c_k obj_k + β KL_k
//
//	seq-mean-token-mean:  loss = (1/denom) Σ_b (Σ_k m ℓ_k) / max(1, Σ_k m)   denom = sequences with a counted token in the step
//	token-mean:           loss = (1/denom) Σ_b Σ_k m ℓ_k                     denom = counted tokens in the step (always under dapo)
//
// Because denom counts the whole optimizer step (not this micro-batch), the micro-batch losses
// — and their gradients — sum to the full-batch ones. Each sequence carries its own phase's
// advantage A_b (the phase mask); padding tokens and padding rows have m = 0.
func buildObjective(cfg Config, in objectiveInputs) objective {
	logp := in.logp
	dtype := logp.DType()
	g := logp.Graph()
	as := func(x *Node) *Node {
		if x != nil && x.DType() != dtype {
			return ConvertDType(x, dtype)
		}
		return x
	}
	mask, adv, denom, old, rollout := as(in.mask), as(in.adv), as(in.denom), as(in.old), as(in.rollout)
	counted := GreaterThan(mask, ScalarZero(g, dtype)) // [B, K] bool
	zero := ScalarZero(g, dtype)
	seqSum := func(x *Node) *Node { return ReduceSum(Mul(x, mask), -1) } // [B]
	seqTokens := MaxScalar(ReduceSum(mask, -1), 1)                       // max(1, Σ_k m) [B]

	// Differences are taken only where m = 1, so padding can never produce Inf/NaN (nor
	// their gradients).
	logRatio := Where(counted, Sub(logp, old), zero) // [B, K]
	ratio := Exp(logRatio)                           // ρ_k
	A := InsertAxes(adv, -1)                         // [B, 1]
	lo, hi := 1-cfg.ClipEpsilon, 1+cfg.EpsilonHigh()

	var obj, isClipped *Node // [B, K]
	switch cfg.Loss {
	case LossGSPO:
		s := InsertAxes(Exp(Div(seqSum(logRatio), seqTokens)), -1) // s_b [B, 1]
		unclipped := Mul(s, A)                                     // s_b A
		clipped := Mul(ClipScalar(s, lo, hi), A)                   // clip(s_b) A
		obj = BroadcastToDims(Min(unclipped, clipped), logp.Shape().Dimensions...)
		isClipped = BroadcastToDims(ConvertDType(LessThan(clipped, unclipped), dtype), logp.Shape().Dimensions...)
	case LossCISPO:
		w := StopGradient(MinScalar(ratio, hi))                                   // sg(min(ρ_k, 1+ε_high))
		obj = Mul(Mul(w, A), Where(counted, logp, zero))                          // sg(·) A log π_θ
		isClipped = ConvertDType(GreaterThan(ratio, Scalar(g, dtype, hi)), dtype) // truncated
	default: // grpo, dapo
		unclipped := Mul(ratio, A)                                    // ρ_k A
		clipped := Mul(ClipScalar(ratio, lo, hi), A)                  // clip(ρ_k) A
		obj = Min(unclipped, clipped)                                 // [B, K]
		isClipped = ConvertDType(LessThan(clipped, unclipped), dtype) // the clipped term is active: no gradient
	}

	var out objective
	if cfg.Corrects() {
		logR := Where(counted, Sub(StopGradient(old), rollout), zero) // log r_k
		out.SeqRolloutKL = seqSum(Sub(Sub(Exp(logR), ScalarOne(g, dtype)), logR))
		if cfg.RolloutCorrectionLevel == LevelSequence {
			logR = BroadcastToDims(InsertAxes(seqSum(logR), -1), logp.Shape().Dimensions...) // log r, for every token of b
		}
		r, C := Exp(logR), cfg.RolloutCorrectionCap
		var c *Node
		if cfg.RolloutCorrection == CorrectionTIS {
			c = MinScalar(r, C)
		} else {
			inside := LogicalAnd(GreaterOrEqual(r, Scalar(g, dtype, 1/C)), LessOrEqual(r, Scalar(g, dtype, C)))
			c = ConvertDType(inside, dtype)
		}
		c = StopGradient(c)
		obj = Mul(c, obj) // c_k obj_k
		out.SeqWeight = seqSum(c)
		out.SeqWeightMax = ReduceMax(Where(counted, c, zero), -1)
		out.SeqMasked = seqSum(ConvertDType(Equal(c, zero), dtype))
	}

	perToken := Neg(obj) // ℓ_k
	kl := ZerosLike(logp)
	if in.ref != nil {
		d := Where(counted, Sub(as(in.ref), logp), zero) // log π_ref − log π_θ
		kl = Sub(Sub(Exp(d), d), ScalarOne(g, dtype))    // k3
		if cfg.Beta != 0 {
			perToken = Add(perToken, MulScalar(kl, cfg.Beta))
		}
	}

	if cfg.Aggregation() == AggTokenMean {
		out.Loss = Div(ReduceAllSum(Mul(perToken, mask)), denom)
	} else {
		out.Loss = Div(ReduceAllSum(Div(seqSum(perToken), seqTokens)), denom)
	}
	out.SeqRatio, out.SeqKL, out.SeqClipped = seqSum(ratio), seqSum(kl), seqSum(isClipped)
	out.SeqNegLogP = seqSum(Where(counted, Neg(logp), zero))
	out.PerToken = perToken
	return out
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
