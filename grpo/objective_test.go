package grpo

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// twinInputs are the objective's inputs as plain Go values: [B][K] and [B].
type twinInputs struct {
	logp, old, ref, mask [][]float64
	adv                  []float64
	denom                float64
}

// twinResult is the plain-Go twin's output.
type twinResult struct {
	loss                                    float64
	seqRatio, seqKL, seqClipped, seqNegLogP []float64
	grad                                    [][]float64 // ∂loss/∂logp, analytic
}

// twinObjective is the plain-Go twin of buildObjective: the same equations (docs/design.md#turn-wise-grpo), written
// token by token in float64, with the analytic gradient with respect to log π_θ:
//
//	ρ = exp(logp − old); obj = min(ρA, clip(ρ)A) − β KL; KL = e^d − d − 1, d = ref − logp
//	∂(−obj)/∂logp = −ρA (unclipped term active) or 0 (clipped term active)  +  β(1 − e^d)
func twinObjective(cfg Config, in twinInputs) twinResult {
	B := len(in.logp)
	r := twinResult{
		seqRatio: make([]float64, B), seqKL: make([]float64, B),
		seqClipped: make([]float64, B), seqNegLogP: make([]float64, B),
		grad: make([][]float64, B),
	}
	eps := cfg.ClipEpsilon
	for b := range B {
		K := len(in.logp[b])
		r.grad[b] = make([]float64, K)
		tokens := 0.0
		for k := range K {
			tokens += in.mask[b][k]
		}
		weight := 1 / in.denom // ∂loss/∂ℓ_k for a counted token
		if cfg.LossAggregation == AggSeqMeanTokenMean {
			weight /= math.Max(1, tokens)
		}
		for k := range K {
			if in.mask[b][k] == 0 {
				continue
			}
			A := in.adv[b]
			rho := math.Exp(in.logp[b][k] - in.old[b][k])
			unclipped := rho * A
			clipped := math.Min(math.Max(rho, 1-eps), 1+eps) * A
			surr, dSurr := unclipped, rho*A
			if clipped < unclipped {
				surr, dSurr = clipped, 0
				r.seqClipped[b]++
			}
			kl, dKL := 0.0, 0.0
			if in.ref != nil {
				d := in.ref[b][k] - in.logp[b][k]
				kl, dKL = math.Exp(d)-d-1, 1-math.Exp(d)
			}
			lossTok := -(surr - cfg.Beta*kl)
			r.loss += weight * lossTok
			r.grad[b][k] = weight * (-dSurr + cfg.Beta*dKL)
			r.seqRatio[b] += rho
			r.seqKL[b] += kl
			r.seqNegLogP[b] -= in.logp[b][k]
		}
	}
	return r
}

// randomInputs draws an objective input where about a third of the ratios fall outside
// [1−ε, 1+ε], one row has no counted token, one has advantage 0, and masked entries of
// old/ref hold huge values that must not leak into the loss.
func randomInputs(rng *rand.Rand, B, K int, withRef bool, agg string) twinInputs {
	in := twinInputs{adv: make([]float64, B)}
	seqs, toks := 0, 0
	for b := range B {
		lp, old, ref, m := make([]float64, K), make([]float64, K), make([]float64, K), make([]float64, K)
		n := 0
		for k := range K {
			lp[k] = -0.05 - 3*rng.Float64()
			old[k] = lp[k] + 0.3*rng.NormFloat64()
			ref[k] = lp[k] + 0.3*rng.NormFloat64()
			if b != 1 && (k == 0 || rng.Float64() < 0.7) {
				m[k] = 1
				n++
			} else {
				old[k], ref[k] = 1e30, -1e30 // padding garbage
			}
		}
		if n > 0 {
			seqs++
		}
		toks += n
		in.logp, in.old, in.ref, in.mask = append(in.logp, lp), append(in.old, old), append(in.ref, ref), append(in.mask, m)
		in.adv[b] = rng.NormFloat64()
	}
	in.adv[2] = 0
	if !withRef {
		in.ref = nil
	}
	in.denom = float64(seqs)
	if agg == AggTokenMean {
		in.denom = float64(toks)
	}
	return in
}

// graphObjective runs buildObjective on in, in the given dtype, and returns the loss, the
// per-sequence sums and ∂loss/∂logp from graph.Gradient.
func graphObjective(t *testing.T, cfg Config, in twinInputs, dtype dtypes.DType) twinResult {
	t.Helper()
	B, K := len(in.logp), len(in.logp[0])
	flat := func(x [][]float64) *tensors.Tensor {
		out := make([]float64, 0, B*K)
		for _, row := range x {
			out = append(out, row...)
		}
		return tensors.FromFlatDataAndDimensions(out, B, K)
	}
	args := []any{flat(in.logp), flat(in.old), flat(in.mask), tensors.FromFlatDataAndDimensions(in.adv, B), in.denom}
	if in.ref != nil {
		args = append(args, flat(in.ref))
	}
	exec, err := NewExec(backend(t), func(x []*Node) []*Node {
		for i := range x {
			x[i] = ConvertDType(x[i], dtype)
		}
		var ref *Node
		if len(x) > 5 {
			ref = x[5]
		}
		obj := buildObjective(cfg, x[0], x[1], ref, x[2], x[3], x[4])
		grad := Gradient(obj.Loss, x[0])[0]
		outs := []*Node{obj.Loss, obj.SeqRatio, obj.SeqKL, obj.SeqClipped, obj.SeqNegLogP, grad}
		for i := range outs {
			outs[i] = ConvertDType(outs[i], dtypes.Float64)
		}
		return outs
	})
	if err != nil {
		t.Fatal(err)
	}
	outs, err := exec.Exec(args...)
	if err != nil {
		t.Fatal(err)
	}
	vec := func(x *tensors.Tensor) []float64 { return tensors.MustCopyFlatData[float64](x) }
	r := twinResult{loss: tensors.ToScalar[float64](outs[0]),
		seqRatio: vec(outs[1]), seqKL: vec(outs[2]), seqClipped: vec(outs[3]), seqNegLogP: vec(outs[4])}
	g := vec(outs[5])
	for b := range B {
		r.grad = append(r.grad, g[b*K:(b+1)*K])
	}
	return r
}

func maxAbsDiff(a, b []float64) float64 {
	d := 0.0
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

func flatten(x [][]float64) []float64 {
	var out []float64
	for _, row := range x {
		out = append(out, row...)
	}
	return out
}

var objectiveCases = []struct {
	name    string
	agg     string
	beta    float64
	withRef bool
}{
	{"seq-mean-token-mean, beta 0, no reference", AggSeqMeanTokenMean, 0, false},
	{"seq-mean-token-mean, beta 0.04", AggSeqMeanTokenMean, 0.04, true},
	{"token-mean, beta 0.3", AggTokenMean, 0.3, true},
	{"token-mean, beta 0 with reference (KL reported only)", AggTokenMean, 0, true},
}

// TestObjectiveGraphMatchesTwin checks the graph objective against the plain-Go twin on
// random inputs: within 1e-6 in float32 and 1e-12 in float64, for the loss, the diagnostics
// and the gradient.
func TestObjectiveGraphMatchesTwin(t *testing.T) {
	for ci, c := range objectiveCases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.LossAggregation, cfg.Beta = c.agg, c.beta
			rng := rand.New(rand.NewPCG(7, uint64(ci)))
			in := randomInputs(rng, 6, 9, c.withRef, c.agg)
			want := twinObjective(cfg, in)
			clipped := 0.0
			for _, v := range want.seqClipped {
				clipped += v
			}
			if clipped == 0 {
				t.Fatal("test inputs clip no token: the clipped branch is not exercised")
			}
			for _, tc := range []struct {
				dtype dtypes.DType
				tol   float64
			}{{dtypes.Float32, 1e-6}, {dtypes.Float64, 1e-12}} {
				got := graphObjective(t, cfg, in, tc.dtype)
				if d := math.Abs(got.loss - want.loss); d > tc.tol {
					t.Errorf("%s: loss %v, twin %v (diff %.2g)", tc.dtype, got.loss, want.loss, d)
				}
				for name, pair := range map[string][2][]float64{
					"ratio": {got.seqRatio, want.seqRatio}, "kl": {got.seqKL, want.seqKL},
					"clipped": {got.seqClipped, want.seqClipped}, "neglogp": {got.seqNegLogP, want.seqNegLogP},
					"gradient": {flatten(got.grad), flatten(want.grad)},
				} {
					// Sums of up to 9 tokens of values up to ~3: a relative tolerance on them.
					tol := tc.tol
					if name == "neglogp" || name == "ratio" || name == "kl" {
						tol *= 30
					}
					if d := maxAbsDiff(pair[0], pair[1]); d > tol {
						t.Errorf("%s: %s differs from the twin by %.2g: %v vs %v", tc.dtype, name, d, pair[0], pair[1])
					}
				}
			}
		})
	}
}

// TestObjectiveGradientFiniteDifferences checks graph.Gradient of the loss with respect to
// log π_θ against central differences of the graph's own loss, in float64.
func TestObjectiveGradientFiniteDifferences(t *testing.T) {
	for ci, c := range objectiveCases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.LossAggregation, cfg.Beta = c.agg, c.beta
			rng := rand.New(rand.NewPCG(11, uint64(ci)))
			in := randomInputs(rng, 6, 6, c.withRef, c.agg)
			exact := graphObjective(t, cfg, in, dtypes.Float64)
			lossAt := buildLossExec(t, cfg, in)
			const h = 1e-6
			nonzero := 0
			for b := range in.logp {
				for k := range in.logp[b] {
					x := in.logp[b][k]
					in.logp[b][k] = x + h
					up := lossAt(in)
					in.logp[b][k] = x - h
					down := lossAt(in)
					in.logp[b][k] = x
					fd := (up - down) / (2 * h)
					if math.Abs(fd-exact.grad[b][k]) > 1e-7 {
						t.Errorf("∂loss/∂logp[%d][%d]: graph %v, finite difference %v", b, k, exact.grad[b][k], fd)
					}
					if math.Abs(fd) > 1e-3 {
						nonzero++
					}
					if in.mask[b][k] == 0 && exact.grad[b][k] != 0 {
						t.Errorf("padding entry [%d][%d] has gradient %v", b, k, exact.grad[b][k])
					}
				}
			}
			if nonzero < 5 {
				t.Fatalf("only %d non-zero gradient entries: the check is vacuous", nonzero)
			}
		})
	}
}

// buildLossExec compiles the float64 loss once and returns a function of the inputs.
func buildLossExec(t *testing.T, cfg Config, in twinInputs) func(twinInputs) float64 {
	exec, err := NewExec(backend(t), func(x []*Node) *Node {
		var ref *Node
		if len(x) > 5 {
			ref = x[5]
		}
		return buildObjective(cfg, x[0], x[1], ref, x[2], x[3], x[4]).Loss
	})
	if err != nil {
		t.Fatal(err)
	}
	B, K := len(in.logp), len(in.logp[0])
	flat := func(x [][]float64) *tensors.Tensor { return tensors.FromFlatDataAndDimensions(flatten(x), B, K) }
	return func(in twinInputs) float64 {
		args := []any{flat(in.logp), flat(in.old), flat(in.mask), tensors.FromFlatDataAndDimensions(in.adv, B), in.denom}
		if in.ref != nil {
			args = append(args, flat(in.ref))
		}
		out, err := exec.Exec(args...)
		if err != nil {
			t.Fatal(err)
		}
		return tensors.ToScalar[float64](out[0])
	}
}

// TestObjectiveHandComputed pins the objective on one sequence of two tokens, by hand.
func TestObjectiveHandComputed(t *testing.T) {
	// ε = 0.2, A = 1. Token 0: ρ = e^0 = 1 → min(1, 1) = 1. Token 1: log ρ = ln 1.5 → ρ = 1.5,
	// clipped to 1.2 → min(1.5, 1.2) = 1.2 (clipped). With β = 0.5, ref = logp + ln 2 on token 0
	// (KL = 2 − ln 2 − 1) and ref = logp on token 1 (KL = 0):
	// seq-mean-token-mean over one sequence: loss = −((1 − 0.5(1 − ln 2)) + 1.2) / 2.
	cfg := DefaultConfig()
	cfg.Beta = 0.5
	in := twinInputs{
		logp: [][]float64{{-1, -2}}, old: [][]float64{{-1, -2 - math.Log(1.5)}},
		ref: [][]float64{{-1 + math.Ln2, -2}}, mask: [][]float64{{1, 1}}, adv: []float64{1}, denom: 1,
	}
	want := -((1 - 0.5*(1-math.Ln2)) + 1.2) / 2
	for _, r := range []twinResult{twinObjective(cfg, in), graphObjective(t, cfg, in, dtypes.Float64)} {
		if math.Abs(r.loss-want) > 1e-12 {
			t.Errorf("loss %v, want %v", r.loss, want)
		}
		if r.seqClipped[0] != 1 || math.Abs(r.seqRatio[0]-2.5) > 1e-12 || math.Abs(r.seqKL[0]-(1-math.Ln2)) > 1e-12 {
			t.Errorf("diagnostics: clipped %v ratio %v kl %v, want 1, 2.5, %v", r.seqClipped[0], r.seqRatio[0], r.seqKL[0], 1-math.Ln2)
		}
		// ∂loss/∂logp: token 0: (1/2)(−ρA + β(1 − e^{ln 2})) = (1/2)(−1 − 0.5); token 1: clipped → 0 + β(1 − 1) = 0.
		if math.Abs(r.grad[0][0]+0.75) > 1e-12 || math.Abs(r.grad[0][1]) > 1e-12 {
			t.Errorf("gradient %v, want [-0.75 0]", r.grad[0])
		}
	}
}

func TestTokenLogProbs(t *testing.T) {
	// logits [1, 2, 3] for two positions; targets 2 and 0; temperature 2:
	// log softmax([0.5, 1, 1.5]) = x − log(e^0.5 + e^1 + e^1.5).
	lse := math.Log(math.Exp(0.5) + math.Exp(1) + math.Exp(1.5))
	want := []float64{1.5 - lse, 0.5 - lse}
	out, err := ExecOnce(backend(t), func(logits, targets *Node) *Node {
		return TokenLogProbs(logits, targets, 2)
	}, [][][]float64{{{1, 2, 3}, {1, 2, 3}}}, [][]int32{{2, 0}})
	if err != nil {
		t.Fatal(err)
	}
	got := tensors.MustCopyFlatData[float64](out)
	if maxAbsDiff(got, want) > 1e-12 {
		t.Fatalf("TokenLogProbs = %v, want %v", got, want)
	}
}
