package grpo

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// twinInputs are the objective's inputs as plain Go values: [B][K] and [B]. rollout is nil
// without a rollout correction, ref without a reference.
type twinInputs struct {
	logp, old, ref, rollout, mask [][]float64
	adv                           []float64
	denom                         float64
}

// twinResult is the plain-Go twin's output.
type twinResult struct {
	loss                                             float64
	seqRatio, seqKL, seqClipped, seqNegLogP          []float64
	seqWeight, seqWeightMax, seqMasked, seqRolloutKL []float64   // with a rollout correction
	perToken                                         [][]float64 // ℓ_k, 0 where m = 0
	grad                                             [][]float64 // ∂loss/∂logp, analytic
}

// twinObjective is the plain-Go twin of buildObjective: the same equations
// (docs/design.md#turn-wise-grpo), written token by token in float64, with the analytic
// gradient with respect to log π_θ (the weights w below, and c, are constants):
//
//	ρ = exp(logp − old); KL = e^d − d − 1, d = ref − logp; ℓ = −c·obj + β KL
//	grpo, dapo: obj = min(ρA, clip(ρ, 1−ε, 1+ε_high)A);  ∂obj/∂logp = ρA (unclipped active) or 0
//	gspo:  s = exp(Σ m (logp − old)/n);  obj = min(sA, clip(s)A) at every token;
//	       ∂obj/∂logp_j = sA m_j/n (unclipped active) or 0
//	cispo: obj = w A logp, w = min(ρ, 1+ε_high);  ∂obj/∂logp = wA
//	c: r = exp(old − rollout) per token, or exp(Σ m (old − rollout)) per sequence;
//	   tis min(r, C); mis [1/C ≤ r ≤ C]
//	∂KL/∂logp = 1 − e^d
func twinObjective(cfg Config, in twinInputs) twinResult {
	B := len(in.logp)
	r := twinResult{
		seqRatio: make([]float64, B), seqKL: make([]float64, B),
		seqClipped: make([]float64, B), seqNegLogP: make([]float64, B),
		seqWeight: make([]float64, B), seqWeightMax: make([]float64, B),
		seqMasked: make([]float64, B), seqRolloutKL: make([]float64, B),
		grad: make([][]float64, B), perToken: make([][]float64, B),
	}
	lo, hi := 1-cfg.ClipEpsilon, 1+cfg.EpsilonHigh()
	clip := func(x float64) float64 { return math.Min(math.Max(x, lo), hi) }
	for b := range B {
		K := len(in.logp[b])
		r.grad[b], r.perToken[b] = make([]float64, K), make([]float64, K)
		A := in.adv[b]
		n, sumLogRatio, sumLogR := 0.0, 0.0, 0.0
		for k := range K {
			if in.mask[b][k] != 0 {
				n++
				sumLogRatio += in.logp[b][k] - in.old[b][k]
				if in.rollout != nil {
					sumLogR += in.old[b][k] - in.rollout[b][k]
				}
			}
		}
		weight := 1 / in.denom // ∂loss/∂ℓ_k for a counted token
		if cfg.Aggregation() == AggSeqMeanTokenMean {
			weight /= math.Max(1, n)
		}
		// The correction's weights c_k.
		c := make([]float64, K)
		for k := range K {
			c[k] = 1
			if !cfg.Corrects() || in.mask[b][k] == 0 {
				continue
			}
			logR := in.old[b][k] - in.rollout[b][k]
			r.seqRolloutKL[b] += math.Exp(logR) - 1 - logR
			if cfg.RolloutCorrectionLevel == LevelSequence {
				logR = sumLogR
			}
			ratio, C := math.Exp(logR), cfg.RolloutCorrectionCap
			if cfg.RolloutCorrection == CorrectionTIS {
				c[k] = math.Min(ratio, C)
			} else if ratio >= 1/C && ratio <= C {
				c[k] = 1
			} else {
				c[k] = 0
			}
			r.seqWeight[b] += c[k]
			r.seqWeightMax[b] = math.Max(r.seqWeightMax[b], c[k])
			if c[k] == 0 {
				r.seqMasked[b]++
			}
		}
		sumC := 0.0
		for k := range K {
			if in.mask[b][k] != 0 {
				sumC += c[k]
			}
		}
		// GSPO's sequence ratio and its clipped objective.
		s := math.Exp(sumLogRatio / math.Max(1, n))
		gspoObj, gspoClipped := s*A, false
		if clip(s)*A < s*A {
			gspoObj, gspoClipped = clip(s)*A, true
		}
		for k := range K {
			if in.mask[b][k] == 0 {
				continue
			}
			rho := math.Exp(in.logp[b][k] - in.old[b][k])
			var obj, dObj float64 // dObj: ∂obj_k/∂logp_k (grpo, cispo)
			switch cfg.Loss {
			case LossGSPO:
				obj = gspoObj
				if gspoClipped {
					r.seqClipped[b]++
				}
			case LossCISPO:
				w := math.Min(rho, hi)
				obj, dObj = w*A*in.logp[b][k], w*A
				if rho > hi {
					r.seqClipped[b]++
				}
			default:
				obj, dObj = rho*A, rho*A
				if clip(rho)*A < rho*A {
					obj, dObj = clip(rho)*A, 0
					r.seqClipped[b]++
				}
			}
			kl, dKL := 0.0, 0.0
			if in.ref != nil {
				d := in.ref[b][k] - in.logp[b][k]
				kl, dKL = math.Exp(d)-d-1, 1-math.Exp(d)
			}
			lossTok := -c[k]*obj + cfg.Beta*kl
			r.perToken[b][k] = lossTok
			r.loss += weight * lossTok
			if cfg.Loss == LossGSPO {
				// Every token's obj is the sequence's: ∂/∂logp_k of Σ_j w (−c_j obj) is
				// −w (Σ_j c_j) s A / n when the unclipped term is active.
				if !gspoClipped {
					dObj = sumC * s * A / n
				}
				r.grad[b][k] = weight * (-dObj + cfg.Beta*dKL)
			} else {
				r.grad[b][k] = weight * (-c[k]*dObj + cfg.Beta*dKL)
			}
			r.seqRatio[b] += rho
			r.seqKL[b] += kl
			r.seqNegLogP[b] -= in.logp[b][k]
		}
	}
	return r
}

// randomInputs draws an objective input where about a third of the ratios fall outside
// [1−ε, 1+ε], one row has no counted token, one has advantage 0, and masked entries of
// old/ref/rollout hold huge values that must not leak into the loss.
func randomInputs(rng *rand.Rand, B, K int, withRef, withRollout bool, agg string) twinInputs {
	in := twinInputs{adv: make([]float64, B)}
	seqs, toks := 0, 0
	for b := range B {
		lp, old, ref, roll, m := make([]float64, K), make([]float64, K), make([]float64, K), make([]float64, K), make([]float64, K)
		n := 0
		for k := range K {
			lp[k] = -0.05 - 3*rng.Float64()
			old[k] = lp[k] + 0.3*rng.NormFloat64()
			ref[k] = lp[k] + 0.3*rng.NormFloat64()
			roll[k] = old[k] + 0.3*rng.NormFloat64()
			if b != 1 && (k == 0 || rng.Float64() < 0.7) {
				m[k] = 1
				n++
			} else {
				old[k], ref[k], roll[k] = 1e30, -1e30, 1e30 // padding garbage
			}
		}
		if n > 0 {
			seqs++
		}
		toks += n
		in.logp, in.old, in.ref, in.mask = append(in.logp, lp), append(in.old, old), append(in.ref, ref), append(in.mask, m)
		in.rollout = append(in.rollout, roll)
		in.adv[b] = rng.NormFloat64()
	}
	in.adv[2] = 0
	if !withRef {
		in.ref = nil
	}
	if !withRollout {
		in.rollout = nil
	}
	in.denom = float64(seqs)
	if agg == AggTokenMean {
		in.denom = float64(toks)
	}
	return in
}

// objectiveArgsOf lays out in as the test graphs' arguments: logp, old, mask, adv, denom, then
// ref and rollout when present.
func objectiveArgsOf(in twinInputs) []any {
	B, K := len(in.logp), len(in.logp[0])
	flat := func(x [][]float64) *tensors.Tensor { return tensors.FromFlatDataAndDimensions(flatten(x), B, K) }
	args := []any{flat(in.logp), flat(in.old), flat(in.mask), tensors.FromFlatDataAndDimensions(in.adv, B), in.denom}
	if in.ref != nil {
		args = append(args, flat(in.ref))
	}
	if in.rollout != nil {
		args = append(args, flat(in.rollout))
	}
	return args
}

// objectiveOf builds buildObjective on the test graphs' inputs (objectiveArgsOf's order).
func objectiveOf(cfg Config, in twinInputs, x []*Node) objective {
	oi := objectiveInputs{logp: x[0], old: x[1], mask: x[2], adv: x[3], denom: x[4]}
	rest := x[5:]
	if in.ref != nil {
		oi.ref, rest = rest[0], rest[1:]
	}
	if in.rollout != nil {
		oi.rollout = rest[0]
	}
	return buildObjective(cfg, oi)
}

// graphObjective runs buildObjective on in, in the given dtype, and returns the loss, the
// per-sequence sums, the per-token terms and ∂loss/∂logp from graph.Gradient.
func graphObjective(t *testing.T, cfg Config, in twinInputs, dtype dtypes.DType) twinResult {
	t.Helper()
	B, K := len(in.logp), len(in.logp[0])
	exec, err := NewExec(backend(t), func(x []*Node) []*Node {
		for i := range x {
			x[i] = ConvertDType(x[i], dtype)
		}
		obj := objectiveOf(cfg, in, x)
		grad := Gradient(obj.Loss, x[0])[0]
		outs := []*Node{obj.Loss, obj.SeqRatio, obj.SeqKL, obj.SeqClipped, obj.SeqNegLogP, grad, Mul(obj.PerToken, x[2])}
		if cfg.Corrects() {
			outs = append(outs, obj.SeqWeight, obj.SeqWeightMax, obj.SeqMasked, obj.SeqRolloutKL)
		}
		for i := range outs {
			outs[i] = ConvertDType(outs[i], dtypes.Float64)
		}
		return outs
	})
	if err != nil {
		t.Fatal(err)
	}
	outs, err := exec.Exec(objectiveArgsOf(in)...)
	if err != nil {
		t.Fatal(err)
	}
	vec := func(x *tensors.Tensor) []float64 { return tensors.MustCopyFlatData[float64](x) }
	rows := func(x *tensors.Tensor) [][]float64 {
		flat := vec(x)
		var out [][]float64
		for b := range B {
			out = append(out, flat[b*K:(b+1)*K])
		}
		return out
	}
	r := twinResult{loss: tensors.ToScalar[float64](outs[0]),
		seqRatio: vec(outs[1]), seqKL: vec(outs[2]), seqClipped: vec(outs[3]), seqNegLogP: vec(outs[4]),
		grad: rows(outs[5]), perToken: rows(outs[6])}
	if cfg.Corrects() {
		r.seqWeight, r.seqWeightMax, r.seqMasked, r.seqRolloutKL = vec(outs[7]), vec(outs[8]), vec(outs[9]), vec(outs[10])
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

func sum(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s
}

// objectiveCase is one configuration of the objective under test.
type objectiveCase struct {
	name    string
	agg     string
	beta    float64
	withRef bool
	edit    func(*Config) // the loss and the correction; nil = grpo without one
}

var objectiveCases = []objectiveCase{
	{"seq-mean-token-mean, beta 0, no reference", AggSeqMeanTokenMean, 0, false, nil},
	{"seq-mean-token-mean, beta 0.04", AggSeqMeanTokenMean, 0.04, true, nil},
	{"token-mean, beta 0.3", AggTokenMean, 0.3, true, nil},
	{"token-mean, beta 0 with reference (KL reported only)", AggTokenMean, 0, true, nil},
	{"dapo, clip-higher 0.28, token-mean whatever loss_aggregation says", AggSeqMeanTokenMean, 0.04, true, func(c *Config) {
		c.Loss, c.ClipEpsilonHigh = LossDAPO, 0.28
	}},
	{"gspo, seq-mean-token-mean, beta 0.04", AggSeqMeanTokenMean, 0.04, true, func(c *Config) { c.Loss, c.ClipEpsilon = LossGSPO, 0.07 }},
	{"gspo, token-mean, beta 0", AggTokenMean, 0, false, func(c *Config) { c.Loss, c.ClipEpsilon, c.ClipEpsilonHigh = LossGSPO, 0.03, 0.05 }},
	{"cispo, epsilon high 0.25, beta 0.04", AggTokenMean, 0.04, true, func(c *Config) { c.Loss, c.ClipEpsilonHigh = LossCISPO, 0.25 }},
	{"cispo, epsilon high 4, seq-mean-token-mean", AggSeqMeanTokenMean, 0, false, func(c *Config) { c.Loss, c.ClipEpsilonHigh = LossCISPO, 4 }},
	{"grpo, tis per token, cap 1.3", AggSeqMeanTokenMean, 0.04, true, func(c *Config) {
		c.RolloutCorrection, c.RolloutCorrectionCap = CorrectionTIS, 1.3
	}},
	{"grpo, tis per sequence, cap 2", AggTokenMean, 0, false, func(c *Config) {
		c.RolloutCorrection, c.RolloutCorrectionLevel = CorrectionTIS, LevelSequence
	}},
	{"dapo, mis per token, cap 1.3", AggTokenMean, 0.04, true, func(c *Config) {
		c.Loss, c.RolloutCorrection, c.RolloutCorrectionCap = LossDAPO, CorrectionMIS, 1.3
	}},
	{"gspo, mis per sequence, cap 2", AggSeqMeanTokenMean, 0, false, func(c *Config) {
		c.Loss, c.ClipEpsilon, c.RolloutCorrection, c.RolloutCorrectionLevel = LossGSPO, 0.05, CorrectionMIS, LevelSequence
	}},
	{"cispo, tis per token, cap 1.3", AggSeqMeanTokenMean, 0.04, true, func(c *Config) {
		c.Loss, c.ClipEpsilonHigh, c.RolloutCorrection, c.RolloutCorrectionCap = LossCISPO, 0.25, CorrectionTIS, 1.3
	}},
}

// config returns the case's configuration.
func (c objectiveCase) config() Config {
	cfg := DefaultConfig()
	cfg.LossAggregation, cfg.Beta = c.agg, c.beta
	if c.edit != nil {
		c.edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	return cfg
}

// TestObjectiveGraphMatchesTwin checks the graph objective against the plain-Go twin on
// random inputs, for every loss and correction: within 1e-6 in float32 and 1e-12 in float64,
// for the loss, the per-token terms, the diagnostics and the gradient.
func TestObjectiveGraphMatchesTwin(t *testing.T) {
	for ci, c := range objectiveCases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.config()
			rng := rand.New(rand.NewPCG(7, uint64(ci)))
			in := randomInputs(rng, 8, 9, c.withRef, cfg.Corrects(), cfg.Aggregation())
			want := twinObjective(cfg, in)
			if cfg.Loss != LossCISPO || cfg.EpsilonHigh() < 1 {
				if sum(want.seqClipped) == 0 {
					t.Fatal("test inputs clip no token: the clipped branch is not exercised")
				}
			}
			switch cfg.RolloutCorrection {
			case CorrectionTIS:
				if m := slices.Max(want.seqWeightMax); m != cfg.RolloutCorrectionCap {
					t.Fatalf("no weight reaches the cap %v (max %v): the truncation is not exercised", cfg.RolloutCorrectionCap, m)
				}
			case CorrectionMIS:
				if s := sum(want.seqMasked); s == 0 || s == sum(want.seqWeight)+s {
					t.Fatalf("masked %v, kept %v: both branches of the mask must be exercised", s, sum(want.seqWeight))
				}
			}
			for _, tc := range []struct {
				dtype dtypes.DType
				tol   float64
			}{{dtypes.Float32, 1e-6}, {dtypes.Float64, 1e-12}} {
				got := graphObjective(t, cfg, in, tc.dtype)
				if d := math.Abs(got.loss - want.loss); d > tc.tol {
					t.Errorf("%s: loss %v, twin %v (diff %.2g)", tc.dtype, got.loss, want.loss, d)
				}
				pairs := map[string][2][]float64{
					"ratio": {got.seqRatio, want.seqRatio}, "kl": {got.seqKL, want.seqKL},
					"clipped": {got.seqClipped, want.seqClipped}, "neglogp": {got.seqNegLogP, want.seqNegLogP},
					"gradient": {flatten(got.grad), flatten(want.grad)}, "loss terms": {flatten(got.perToken), flatten(want.perToken)},
				}
				if cfg.Corrects() {
					pairs["weight"] = [2][]float64{got.seqWeight, want.seqWeight}
					pairs["weight max"] = [2][]float64{got.seqWeightMax, want.seqWeightMax}
					pairs["masked"] = [2][]float64{got.seqMasked, want.seqMasked}
					pairs["rollout kl"] = [2][]float64{got.seqRolloutKL, want.seqRolloutKL}
				}
				for name, pair := range pairs {
					// Sums of up to 9 tokens of values up to ~3, and terms of log π (cispo):
					// a relative tolerance on them.
					tol := tc.tol
					if name != "gradient" && name != "clipped" && name != "masked" {
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
// log π_θ against central differences of the graph's own loss, in float64, for every loss
// and correction. CISPO's truncated ratio and the correction's weights carry no gradient by
// definition: for CISPO the difference moves log π_θ, log π_old and log π_rollout together, which
// leaves ρ and r (so the constants) unchanged and moves only the log π_θ factor and the KL.
func TestObjectiveGradientFiniteDifferences(t *testing.T) {
	for ci, c := range objectiveCases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.config()
			rng := rand.New(rand.NewPCG(11, uint64(ci)))
			in := randomInputs(rng, 6, 6, c.withRef, cfg.Corrects(), cfg.Aggregation())
			exact := graphObjective(t, cfg, in, dtypes.Float64)
			lossAt := buildLossExec(t, cfg, in)
			const h = 1e-6
			nonzero := 0
			shift := func(b, k int, d float64) {
				in.logp[b][k] += d
				if cfg.Loss == LossCISPO {
					in.old[b][k] += d
					if in.rollout != nil {
						in.rollout[b][k] += d
					}
				}
			}
			for b := range in.logp {
				for k := range in.logp[b] {
					if in.mask[b][k] == 0 && cfg.Loss == LossCISPO {
						continue // the padding garbage of old/rollout does not survive a shift
					}
					shift(b, k, h)
					up := lossAt(in)
					shift(b, k, -2*h)
					down := lossAt(in)
					shift(b, k, h)
					fd := (up - down) / (2 * h)
					if math.Abs(fd-exact.grad[b][k]) > 1e-7 {
						t.Errorf("∂loss/∂logp[%d][%d]: graph %v, finite difference %v", b, k, exact.grad[b][k], fd)
					}
					if math.Abs(fd) > 1e-4 {
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
		return objectiveOf(cfg, in, x).Loss
	})
	if err != nil {
		t.Fatal(err)
	}
	return func(in twinInputs) float64 {
		out, err := exec.Exec(objectiveArgsOf(in)...)
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

// TestLossesHandComputed pins each loss and correction on small cases worked out by hand:
// the per-token terms ℓ_k, the loss and ∂loss/∂logp, in the twin and the graph.
func TestLossesHandComputed(t *testing.T) {
	ln := math.Log
	cases := []struct {
		name    string
		edit    func(*Config)
		in      twinInputs
		terms   []float64 // ℓ_k
		loss    float64
		grad    []float64
		weight  float64 // Σ_k m c_k (with a correction)
		masked  float64
		clipped float64
	}{
		{
			// dapo, ε = 0.2, ε_high = 0.28, A = 1, token-mean over 3 tokens (loss_aggregation left at
			// seq-mean-token-mean): ρ = 1.25 (inside 1.28: 1.25), 1.5 (clipped to 1.28), 0.5 with
			// A = 1: min(0.5, 0.8) = 0.5 (unclipped). ℓ = −1.25, −1.28, −0.5; loss = −3.03/3.
			// ∂/∂logp = −ρA/3 for the unclipped: −1.25/3, 0, −0.5/3.
			name: "dapo clip-higher",
			edit: func(c *Config) { c.Loss, c.ClipEpsilonHigh = LossDAPO, 0.28 },
			in: twinInputs{logp: [][]float64{{ln(1.25) - 1, ln(1.5) - 1, ln(0.5) - 1}}, old: [][]float64{{-1, -1, -1}},
				mask: [][]float64{{1, 1, 1}}, adv: []float64{1}, denom: 3},
			terms: []float64{-1.25, -1.28, -0.5}, loss: -3.03 / 3, grad: []float64{-1.25 / 3, 0, -0.5 / 3}, clipped: 1,
		},
		{
			// gspo, ε = 0.2, A = −1, two tokens with log ρ = ln 1.5 and ln 0.6: s = exp((ln 1.5 + ln 0.6)/2)
			// = √0.9, inside [0.8, 1.2]: obj = −√0.9 at both tokens, ℓ = √0.9, √0.9; seq-mean-token-mean:
			// loss = √0.9. ∂loss/∂logp_k = (1/2)(−Σ_j c_j s A / 2) = (1/2)(2 √0.9 / 2) = √0.9 / 2.
			name: "gspo",
			edit: func(c *Config) { c.Loss = LossGSPO },
			in: twinInputs{logp: [][]float64{{ln(1.5) - 2, ln(0.6) - 1}}, old: [][]float64{{-2, -1}},
				mask: [][]float64{{1, 1}}, adv: []float64{-1}, denom: 1},
			terms: []float64{math.Sqrt(0.9), math.Sqrt(0.9)}, loss: math.Sqrt(0.9), grad: []float64{math.Sqrt(0.9) / 2, math.Sqrt(0.9) / 2},
		},
		{
			// gspo clipped: A = 1, s = exp(ln 1.44 / 2)... both tokens log ρ = ln 1.44 → s = 1.44 > 1.2:
			// obj = 1.2 at both, clipped, gradient 0 (β = 0).
			name: "gspo clipped",
			edit: func(c *Config) { c.Loss = LossGSPO },
			in: twinInputs{logp: [][]float64{{ln(1.44) - 1, ln(1.44) - 1}}, old: [][]float64{{-1, -1}},
				mask: [][]float64{{1, 1}}, adv: []float64{1}, denom: 1},
			terms: []float64{-1.2, -1.2}, loss: -1.2, grad: []float64{0, 0}, clipped: 2,
		},
		{
			// cispo, ε_high = 4: token 0 ρ = 2 (kept), token 1 ρ = 8 (truncated to 5); A = 1,
			// log π_θ = −1 and −2. obj = 2·(−1) = −2 and 5·(−2) = −10; ℓ = 2, 10; token-mean over
			// 2: loss = 6. ∂/∂logp = −wA/2: −1, −2.5.
			name: "cispo",
			edit: func(c *Config) { c.Loss, c.ClipEpsilonHigh, c.LossAggregation = LossCISPO, 4, AggTokenMean },
			in: twinInputs{logp: [][]float64{{-1, -2}}, old: [][]float64{{-1 - ln(2), -2 - ln(8)}},
				mask: [][]float64{{1, 1}}, adv: []float64{1}, denom: 2},
			terms: []float64{2, 10}, loss: 6, grad: []float64{-1, -2.5}, clipped: 1,
		},
		{
			// grpo + tis per token, C = 2, μ = 1 (old = logp): r_k = exp(old − rollout) = 3 (capped to
			// 2) and 0.5. ρ = 1, A = 1: obj = 1; ℓ = −2, −0.5; seq-mean: loss = −1.25; ∂ = −cρA/2 =
			// −1, −0.25.
			name: "tis per token",
			edit: func(c *Config) { c.RolloutCorrection = CorrectionTIS },
			in: twinInputs{logp: [][]float64{{-1, -1}}, old: [][]float64{{-1, -1}}, rollout: [][]float64{{-1 - ln(3), -1 + ln(2)}},
				mask: [][]float64{{1, 1}}, adv: []float64{1}, denom: 1},
			terms: []float64{-2, -0.5}, loss: -1.25, grad: []float64{-1, -0.25}, weight: 2.5,
		},
		{
			// grpo + tis per sequence, C = 2: r = exp(ln 3 − ln 2) = 1.5 for both tokens; ℓ = −1.5 each;
			// loss = −1.5; ∂ = −1.5/2 = −0.75 each.
			name: "tis per sequence",
			edit: func(c *Config) { c.RolloutCorrection, c.RolloutCorrectionLevel = CorrectionTIS, LevelSequence },
			in: twinInputs{logp: [][]float64{{-1, -1}}, old: [][]float64{{-1, -1}}, rollout: [][]float64{{-1 - ln(3), -1 + ln(2)}},
				mask: [][]float64{{1, 1}}, adv: []float64{1}, denom: 1},
			terms: []float64{-1.5, -1.5}, loss: -1.5, grad: []float64{-0.75, -0.75}, weight: 3,
		},
		{
			// grpo + mis per token, C = 2: r = 3 (masked: c = 0), 0.5 (= 1/C: kept, c = 1), 2 (= C: kept).
			// ℓ = 0, −1, −1 with A = 1, ρ = 1; seq-mean over 3: loss = −2/3; ∂ = 0, −1/3, −1/3.
			name: "mis per token",
			edit: func(c *Config) { c.RolloutCorrection = CorrectionMIS },
			in: twinInputs{logp: [][]float64{{-1, -1, -1}}, old: [][]float64{{-1, -1, -1}}, rollout: [][]float64{{-1 - ln(3), -1 + ln(2), -1 - ln(2)}},
				mask: [][]float64{{1, 1, 1}}, adv: []float64{1}, denom: 1},
			terms: []float64{0, -1, -1}, loss: -2.0 / 3, grad: []float64{0, -1.0 / 3, -1.0 / 3}, weight: 2, masked: 1,
		},
		{
			// mis per sequence, C = 2: r = exp(ln 3 + ln 2) = 6 > 2: the whole sequence is masked; with
			// β = 0.5 and ref = logp + ln 2 on token 0 only, ℓ = β(2 − ln 2 − 1), 0; loss = their mean;
			// ∂ = (1/2)β(1 − 2) = −0.25, 0.
			name: "mis per sequence",
			edit: func(c *Config) {
				c.RolloutCorrection, c.RolloutCorrectionLevel, c.Beta = CorrectionMIS, LevelSequence, 0.5
			},
			in: twinInputs{logp: [][]float64{{-1, -1}}, old: [][]float64{{-1, -1}}, rollout: [][]float64{{-1 - ln(3), -1 - ln(2)}},
				ref: [][]float64{{-1 + ln(2), -1}}, mask: [][]float64{{1, 1}}, adv: []float64{1}, denom: 1},
			terms: []float64{0.5 * (1 - ln(2)), 0}, loss: 0.25 * (1 - ln(2)), grad: []float64{-0.25, 0}, weight: 0, masked: 2,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Beta = 0
			c.edit(&cfg)
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			for _, r := range []twinResult{twinObjective(cfg, c.in), graphObjective(t, cfg, c.in, dtypes.Float64)} {
				if math.Abs(r.loss-c.loss) > 1e-12 || maxAbsDiff(r.perToken[0], c.terms) > 1e-12 || maxAbsDiff(r.grad[0], c.grad) > 1e-12 {
					t.Errorf("loss %v terms %v gradient %v, want %v %v %v", r.loss, r.perToken[0], r.grad[0], c.loss, c.terms, c.grad)
				}
				if r.seqClipped[0] != c.clipped {
					t.Errorf("clipped %v, want %v", r.seqClipped[0], c.clipped)
				}
				if cfg.Corrects() && (math.Abs(r.seqWeight[0]-c.weight) > 1e-12 || r.seqMasked[0] != c.masked) {
					t.Errorf("weights %v masked %v, want %v %v", r.seqWeight[0], r.seqMasked[0], c.weight, c.masked)
				}
			}
		})
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
