package grpo

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// legacyResult is what the objective returned before the loss variants and corrections.
type legacyResult struct {
	Loss, SeqRatio, SeqKL, SeqClipped, SeqNegLogP *Node
}

// legacyObjective is buildObjective as it was before grpo.loss, grpo.clip_epsilon_high and
// grpo.rollout_correction, kept verbatim: the default configuration must still compute it
// to the bit.
func legacyObjective(cfg Config, logp, old, ref, mask, adv, denom *Node) legacyResult {
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
	return legacyResult{
		Loss:       loss,
		SeqRatio:   seqSum(ratio),
		SeqKL:      seqSum(kl),
		SeqClipped: seqSum(isClipped),
		SeqNegLogP: seqSum(Where(counted, Neg(logp), zero)),
	}
}

// TestDefaultObjectiveUnchanged: with the default loss (grpo, ε_high = ε, no correction) the
// objective's loss, diagnostics and gradient are bit-identical to the objective before the
// variants existed, in float32, for both aggregations, with and without a reference.
func TestDefaultObjectiveUnchanged(t *testing.T) {
	for ci, c := range objectiveCases[:4] {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.config()
			in := randomInputs(rand.New(rand.NewPCG(17, uint64(ci))), 6, 9, c.withRef, false, cfg.Aggregation())
			run := func(legacy bool) []float32 {
				exec, err := NewExec(backend(t), func(x []*Node) []*Node {
					for i := range x {
						x[i] = ConvertDType(x[i], dtypes.Float32)
					}
					var outs []*Node
					if legacy {
						var ref *Node
						if len(x) > 5 {
							ref = x[5]
						}
						o := legacyObjective(cfg, x[0], x[1], ref, x[2], x[3], x[4])
						outs = []*Node{o.Loss, o.SeqRatio, o.SeqKL, o.SeqClipped, o.SeqNegLogP, Gradient(o.Loss, x[0])[0]}
					} else {
						o := objectiveOf(cfg, in, x)
						outs = []*Node{o.Loss, o.SeqRatio, o.SeqKL, o.SeqClipped, o.SeqNegLogP, Gradient(o.Loss, x[0])[0]}
					}
					flat := make([]*Node, len(outs))
					for i, o := range outs {
						flat[i] = Reshape(o, -1)
					}
					return []*Node{Concatenate(flat, 0)}
				})
				if err != nil {
					t.Fatal(err)
				}
				out, err := exec.Exec(objectiveArgsOf(in)...)
				if err != nil {
					t.Fatal(err)
				}
				return tensors.MustCopyFlatData[float32](out[0])
			}
			old, now := run(true), run(false)
			nonzero := 0
			for i := range old {
				if math.Float32bits(old[i]) != math.Float32bits(now[i]) {
					t.Fatalf("value %d: %v now, %v before", i, now[i], old[i])
				}
				if old[i] != 0 {
					nonzero++
				}
			}
			if nonzero < len(old)/2 {
				t.Fatalf("only %d of %d values are non-zero", nonzero, len(old))
			}
		})
	}
}
