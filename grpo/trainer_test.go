package grpo

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// weights returns a copy of the values of ctx's variables in scope.
func weights(t *testing.T, ctx *context.Context, scope string) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for v := range ctx.In(scope).IterVariablesInScope() {
		value, err := v.Value()
		if err != nil {
			t.Fatal(err)
		}
		out[v.Name()] = tensors.MustCopyFlatData[float32](value)
	}
	return out
}

func maxWeightDiff(a, b map[string][]float32) float64 {
	d := 0.0
	for name, x := range a {
		for i := range x {
			d = math.Max(d, math.Abs(float64(x[i]-b[name][i])))
		}
	}
	return d
}

// randomBatch builds B sequences of the tiny vocabulary with prompts of 1–3 tokens and
// completions of 1–5, mixed phases and random advantages.
func randomBatch(rng *rand.Rand, B int) *Batch {
	var seqs []Sequence
	for i := range B {
		s := Sequence{Phase: Phase(i % 2), Advantage: float32(rng.NormFloat64()), Reward: float32(i % 3)}
		for range 1 + rng.IntN(3) {
			s.Prompt = append(s.Prompt, int32(rng.IntN(tinyVocab)))
		}
		for range 1 + rng.IntN(5) {
			s.Completion = append(s.Completion, int32(rng.IntN(tinyVocab)))
		}
		seqs = append(seqs, s)
	}
	b, err := NewBatch(seqs)
	if err != nil {
		panic(err)
	}
	return b
}

// perturb returns x + N(0, sigma) on counted entries.
func perturb(rng *rand.Rand, x [][]float32, mask [][]float32, sigma float64) [][]float32 {
	out := make([][]float32, len(x))
	for i := range x {
		out[i] = make([]float32, len(x[i]))
		for k := range x[i] {
			if mask[i][k] != 0 {
				out[i][k] = x[i][k] + float32(sigma*rng.NormFloat64())
			}
		}
	}
	return out
}

func to64(x [][]float32) [][]float64 {
	out := make([][]float64, len(x))
	for i := range x {
		out[i] = make([]float64, len(x[i]))
		for k := range x[i] {
			out[i][k] = float64(x[i][k])
		}
	}
	return out
}

// twinInputsOf returns the twin's inputs for batch b with current log-probs logp.
func twinInputsOf(cfg Config, b *Batch, logp [][]float32) twinInputs {
	in := twinInputs{logp: to64(logp), old: to64(b.OldLogProbs), mask: to64(b.LossMask)}
	if b.OldLogProbs == nil {
		in.old = in.logp
	}
	if b.RefLogProbs != nil {
		in.ref = to64(b.RefLogProbs)
	}
	seqs, toks := 0, 0
	for i := range b.LossMask {
		n := 0
		for _, m := range b.LossMask[i] {
			n += int(m)
		}
		toks += n
		if n > 0 {
			seqs++
		}
		in.adv = append(in.adv, float64(b.Advantages[i]))
	}
	in.denom = float64(seqs)
	if cfg.Aggregation() == AggTokenMean {
		in.denom = float64(toks)
	}
	return in
}

// TestAccumulationMatchesOneBatch: micro-batches of 3 sequences give the loss, the gradient
// norm and the updates of one micro-batch holding all 11; the loss also equals the plain-Go
// twin's full-batch loss.
func TestAccumulationMatchesOneBatch(t *testing.T) {
	for _, agg := range []string{AggSeqMeanTokenMean, AggTokenMean} {
		t.Run(agg, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 0))
			cfg := DefaultConfig()
			cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.LossAggregation = 0.01, 0, 0.1, agg
			cfg.AdamEpsilon = 1e-3 // keeps the update linear in tiny gradients, so float noise stays small
			cfg.MaxGradNorm = 0.2

			whole := context.New()
			tinyInit(whole, 3)
			split, err := whole.Clone()
			if err != nil {
				t.Fatal(err)
			}
			b := randomBatch(rng, 11)
			ref, err := whole.Clone()
			if err != nil {
				t.Fatal(err)
			}

			cfg.MicroBatchSize = 16
			trWhole, err := NewTrainer(backend(t), whole, tinyPolicy, cfg, 0)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MicroBatchSize = 3
			trSplit, err := NewTrainer(backend(t), split, tinyPolicy, cfg, 0)
			if err != nil {
				t.Fatal(err)
			}
			logp, err := trWhole.LogProbs(whole, b)
			if err != nil {
				t.Fatal(err)
			}
			b.OldLogProbs = perturb(rng, logp, b.LossMask, 0.2)
			if b.RefLogProbs, err = trWhole.LogProbs(ref, b); err != nil {
				t.Fatal(err)
			}
			b.RefLogProbs = perturb(rng, b.RefLogProbs, b.LossMask, 0.1)
			want := twinObjective(cfg, twinInputsOf(cfg, b, logp))

			for step := range 2 {
				sw, err := trWhole.Step(b)
				if err != nil {
					t.Fatal(err)
				}
				ss, err := trSplit.Step(b)
				if err != nil {
					t.Fatal(err)
				}
				if step == 0 && math.Abs(sw.Loss-want.loss) > 1e-5 {
					t.Errorf("one micro-batch: loss %v, twin %v", sw.Loss, want.loss)
				}
				if math.Abs(ss.Loss-sw.Loss) > 1e-5 || math.Abs(ss.GradNorm-sw.GradNorm) > 1e-5*sw.GradNorm {
					t.Errorf("step %d: 4 micro-batches give loss %v grad norm %v, one gives %v and %v",
						step+1, ss.Loss, ss.GradNorm, sw.Loss, sw.GradNorm)
				}
				if math.Abs(ss.ClipFrac-sw.ClipFrac) > 1e-6 || math.Abs(ss.MeanKL-sw.MeanKL) > 1e-5 {
					t.Errorf("step %d: diagnostics differ: %v vs %v", step+1, ss, sw)
				}
				if sw.GradNorm <= cfg.MaxGradNorm {
					t.Errorf("step %d: gradient norm %v does not exercise clipping at %v", step+1, sw.GradNorm, cfg.MaxGradNorm)
				}
			}
			if d := maxWeightDiff(weights(t, whole, "tiny"), weights(t, split, "tiny")); d > 1e-6 {
				t.Errorf("weights after 2 steps differ by %.2g", d)
			}
			if d := maxWeightDiff(weights(t, whole, "tiny"), weights(t, ref, "tiny")); d < 1e-3 {
				t.Errorf("weights moved only %.2g: the comparison is vacuous", d)
			}
		})
	}
}

// directPolicy's log-probs are its own variables: log π[b, k] = w[b, k] + bias[k], so the
// gradient with respect to them is the objective's gradient with respect to log π.
func directPolicy(ctx *context.Context, tokens, attn, targetPos *Node) *Node {
	g := tokens.Graph()
	c := ctx.In("direct").Reuse()
	w, bias := c.GetVariable("w").ValueGraph(g), c.GetVariable("bias").ValueGraph(g)
	if w.Shape().Dim(0) != targetPos.Shape().Dim(0) || w.Shape().Dim(1) != targetPos.Shape().Dim(1) {
		panic("directPolicy: target positions " + targetPos.Shape().String() + " do not match w " + w.Shape().String())
	}
	return Add(w, InsertAxes(bias, 0))
}

// TestAdamWMatchesTwin runs three optimizer steps of the trainer on directPolicy and of a
// plain-Go AdamW (PyTorch's algorithm) fed with the twin's gradient: warm-up, linear decay,
// global-norm clipping, and weight decay on the matrix w but not on the vector bias.
func TestAdamWMatchesTwin(t *testing.T) {
	const B, K = 4, 8
	rng := rand.New(rand.NewPCG(5, 0))
	cfg := DefaultConfig()
	cfg.LearningRate, cfg.WarmupSteps, cfg.LRSchedule = 0.05, 2, ScheduleLinear
	cfg.AdamBeta1, cfg.AdamBeta2, cfg.AdamEpsilon = 0.8, 0.95, 1e-6
	cfg.WeightDecay, cfg.MaxGradNorm, cfg.Beta, cfg.MicroBatchSize = 0.5, 0.1, 0.2, B
	const total = 3

	// A batch whose K is exactly the bucket (8) and the last entry of row 0 counts.
	b := &Batch{}
	w0, bias0 := make([]float64, B*K), make([]float64, K)
	for i := range B {
		tokens, attn := make([]int32, 12), make([]int32, 12)
		pos, mask, old, ref := make([]int32, K), make([]float32, K), make([]float32, K), make([]float32, K)
		for p := range 12 {
			attn[p] = 1
		}
		for k := range K {
			pos[k] = int32(3 + k)
			if i == 0 || rng.Float64() < 0.7 {
				mask[k] = 1
			}
			w0[i*K+k] = -0.1 - 2*rng.Float64()
			old[k] = float32(w0[i*K+k] + 0.3*rng.NormFloat64())
			ref[k] = float32(w0[i*K+k] + 0.3*rng.NormFloat64())
		}
		b.Tokens, b.AttnMask, b.TargetPos, b.LossMask = append(b.Tokens, tokens), append(b.AttnMask, attn), append(b.TargetPos, pos), append(b.LossMask, mask)
		b.OldLogProbs, b.RefLogProbs = append(b.OldLogProbs, old), append(b.RefLogProbs, ref)
		b.Advantages, b.Phase = append(b.Advantages, float32(rng.NormFloat64())), append(b.Phase, PhaseJudge)
	}
	for k := range K {
		bias0[k] = 0.1 * rng.NormFloat64()
	}
	ctx := context.New()
	w32, b32 := make([]float32, B*K), make([]float32, K)
	for i := range w0 {
		w32[i] = float32(w0[i])
		w0[i] = float64(w32[i]) // start the twin from the same float32 values
	}
	for i := range bias0 {
		b32[i] = float32(bias0[i])
		bias0[i] = float64(b32[i])
	}
	ctx.In("direct").VariableWithValue("w", tensors.FromFlatDataAndDimensions(w32, B, K))
	ctx.In("direct").VariableWithValue("bias", tensors.FromFlatDataAndDimensions(b32, K))
	tr, err := NewTrainer(backend(t), ctx, directPolicy, cfg, total)
	if err != nil {
		t.Fatal(err)
	}

	// The twin: parameters θ = (w, bias), moments m, v.
	theta := [][]float64{w0, bias0}
	m := [][]float64{make([]float64, B*K), make([]float64, K)}
	v := [][]float64{make([]float64, B*K), make([]float64, K)}
	clippedSteps := 0
	for s := range total {
		logp := make([][]float32, B)
		for i := range B {
			logp[i] = make([]float32, K)
			for k := range K {
				logp[i][k] = float32(theta[0][i*K+k] + theta[1][k])
			}
		}
		tw := twinObjective(cfg, twinInputsOf(cfg, b, logp))
		grads := [][]float64{make([]float64, B*K), make([]float64, K)}
		norm := 0.0
		for i := range B {
			for k := range K {
				grads[0][i*K+k] = tw.grad[i][k]
				grads[1][k] += tw.grad[i][k]
			}
		}
		for _, gr := range grads {
			for _, x := range gr {
				norm += x * x
			}
		}
		norm = math.Sqrt(norm)
		scale := math.Min(1, cfg.MaxGradNorm/(norm+1e-6))
		if scale < 1 {
			clippedSteps++
		}
		t.Logf("step %d: twin gradient norm %.4f, clip scale %.4f", s+1, norm, scale)
		lr := LearningRate(cfg, s, total)
		n := float64(s + 1)
		for p := range theta {
			for j := range theta[p] {
				gj := grads[p][j] * scale
				m[p][j] = cfg.AdamBeta1*m[p][j] + (1-cfg.AdamBeta1)*gj
				v[p][j] = cfg.AdamBeta2*v[p][j] + (1-cfg.AdamBeta2)*gj*gj
				mHat := m[p][j] / (1 - math.Pow(cfg.AdamBeta1, n))
				vHat := v[p][j] / (1 - math.Pow(cfg.AdamBeta2, n))
				if p == 0 { // decoupled weight decay on the matrix only
					theta[p][j] -= lr * cfg.WeightDecay * theta[p][j]
				}
				theta[p][j] -= lr * mHat / (math.Sqrt(vHat) + cfg.AdamEpsilon)
			}
		}

		st, err := tr.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(st.GradNorm-norm) > 1e-5*norm || math.Abs(st.Loss-tw.loss) > 1e-5 || math.Abs(st.LR-lr) > 1e-12 {
			t.Errorf("step %d: grad norm %v loss %v lr %v, twin %v %v %v", s+1, st.GradNorm, st.Loss, st.LR, norm, tw.loss, lr)
		}
		got := weights(t, ctx, "direct")
		for p, name := range []string{"w", "bias"} {
			for j := range theta[p] {
				if d := math.Abs(float64(got[name][j]) - theta[p][j]); d > 2e-6 {
					t.Fatalf("step %d: %s[%d] = %v, twin %v", s+1, name, j, got[name][j], theta[p][j])
				}
			}
		}
	}
	if clippedSteps == 0 {
		t.Error("no step was clipped: clipping is not exercised")
	}
}

// TestStepRejectsNonFinite: an overflowing loss is an error naming the step; weights and
// optimizer state stay as they were, and the next step equals a fresh trainer's.
func TestStepRejectsNonFinite(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Beta, cfg.LearningRate, cfg.WarmupSteps = 0, 0.01, 0
	ctx := context.New()
	tinyInit(ctx, 6)
	fresh, err := ctx.Clone()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(backend(t), ctx, tinyPolicy, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := randomBatch(rand.New(rand.NewPCG(6, 0)), 5)
	before := weights(t, ctx, "tiny")
	good := b.Advantages
	b.Advantages = []float32{3e38, 3e38, 3e38, 3e38, 3e38}
	_, err = tr.Step(b)
	if err == nil || !strings.Contains(err.Error(), "grpo step 1:") || !strings.Contains(err.Error(), "not finite") {
		t.Fatalf("error %v, want a non-finite error naming step 1", err)
	}
	if d := maxWeightDiff(before, weights(t, ctx, "tiny")); d != 0 || tr.Steps() != 0 {
		t.Fatalf("after the failed step weights moved by %v, steps = %d", d, tr.Steps())
	}
	b.Advantages = good
	if _, err := tr.Step(b); err != nil {
		t.Fatal(err)
	}
	trFresh, err := NewTrainer(backend(t), fresh, tinyPolicy, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trFresh.Step(b); err != nil {
		t.Fatal(err)
	}
	if d := maxWeightDiff(weights(t, ctx, "tiny"), weights(t, fresh, "tiny")); d != 0 {
		t.Fatalf("the step after a failed one differs from a fresh trainer's by %v: state leaked", d)
	}
}

// TestResumeEqualsUninterrupted: 4 steps in one go equal 2 steps, then saving the weights and
// the optimizer state, loading them into a new context and trainer, and 2 more steps — bit for
// bit.
func TestResumeEqualsUninterrupted(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LearningRate, cfg.WarmupSteps, cfg.LRSchedule, cfg.WeightDecay = 0.01, 1, ScheduleLinear, 0.1
	cfg.Beta, cfg.MicroBatchSize = 0.02, 4
	const total = 4
	rng := rand.New(rand.NewPCG(8, 0))
	var batches []*Batch
	for range total {
		batches = append(batches, randomBatch(rng, 6))
	}
	newRun := func(seed uint64) (*context.Context, *Trainer) {
		ctx := context.New()
		tinyInit(ctx, seed)
		tr, err := NewTrainer(backend(t), ctx, tinyPolicy, cfg, total)
		if err != nil {
			t.Fatal(err)
		}
		return ctx, tr
	}
	// Reference log-probs from the starting model, as a run would store them.
	ctxA, trA := newRun(4)
	for _, b := range batches {
		var err error
		if b.RefLogProbs, err = trA.LogProbs(ctxA, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range batches {
		if _, err := trA.Update(b); err != nil {
			t.Fatal(err)
		}
	}

	ctxB, trB := newRun(4)
	for _, b := range batches[:2] {
		if _, err := trB.Update(b); err != nil {
			t.Fatal(err)
		}
	}
	saved := weights(t, ctxB, "tiny")
	state, err := trB.OptimizerState()
	if err != nil {
		t.Fatal(err)
	}
	if got := tensors.ToScalar[int64](state["step"]); got != 2 {
		t.Fatalf("state step = %d, want 2", got)
	}
	if e := state["exp_avg_sq/tiny/E"]; e == nil || e.Shape().Dimensions[0] != tinyVocab || e.Shape().Dimensions[1] != tinyDim {
		t.Fatalf("state exp_avg_sq/tiny/E = %v; keys %v", e, slices.Sorted(maps.Keys(state)))
	}
	if len(state) != 1+3*6 {
		t.Fatalf("state has %d entries, want step + 2 moments and the float32 master (the variable itself) × 6 variables: %v", len(state), slices.Sorted(maps.Keys(state)))
	}

	// A new process: a differently initialized model, then the saved weights and state.
	ctxC, trC := newRun(99)
	for v := range ctxC.In("tiny").IterVariablesInScope() {
		if err := v.SetValue(tensors.FromFlatDataAndDimensions(saved[v.Name()], v.Shape().Dimensions...)); err != nil {
			t.Fatal(err)
		}
	}
	if err := trC.SetOptimizerState(state); err != nil {
		t.Fatal(err)
	}
	for _, b := range batches[2:] {
		st, err := trC.Update(b)
		if err != nil {
			t.Fatal(err)
		}
		if st[0].LR != LearningRate(cfg, st[0].Step-1, total) || st[0].Step < 3 {
			t.Fatalf("resumed step %d used lr %v: the step counter was not restored", st[0].Step, st[0].LR)
		}
	}
	if d := maxWeightDiff(weights(t, ctxA, "tiny"), weights(t, ctxC, "tiny")); d != 0 {
		t.Fatalf("resumed run differs from the uninterrupted one by %v", d)
	}
	if d := maxWeightDiff(weights(t, ctxB, "tiny"), weights(t, ctxC, "tiny")); d == 0 {
		t.Fatal("the last two steps changed nothing: the comparison is vacuous")
	}
}

func TestSetOptimizerStateErrors(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Beta = 0
	newTrainer := func() *Trainer {
		ctx := context.New()
		tinyInit(ctx, 1)
		tr, err := NewTrainer(backend(t), ctx, tinyPolicy, cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	b := randomBatch(rand.New(rand.NewPCG(1, 1)), 3)
	tr := newTrainer()
	if _, err := tr.Step(b); err != nil {
		t.Fatal(err)
	}
	valid, err := tr.OptimizerState()
	if err != nil {
		t.Fatal(err)
	}
	edited := func(edit func(map[string]*tensors.Tensor)) map[string]*tensors.Tensor {
		s := map[string]*tensors.Tensor{}
		for k, v := range valid {
			s[k] = v
		}
		edit(s)
		return s
	}
	step := tensors.FromScalar(int64(7))
	cases := []struct {
		name    string
		state   map[string]*tensors.Tensor
		wantSet string // error from SetOptimizerState
		wantRun string // error from the next Step
	}{
		{"valid", valid, "", ""},
		{"no step", map[string]*tensors.Tensor{}, `no scalar "step"`, ""},
		{"unknown kind", map[string]*tensors.Tensor{"step": step, "momentum/tiny/E": step}, `unknown optimizer state entry "momentum/tiny/E"`, ""},
		{"wrong shape", edited(func(s map[string]*tensors.Tensor) {
			s["exp_avg/tiny/E"] = tensors.FromFlatDataAndDimensions(make([]float32, 4), 2, 2)
		}), `optimizer state "exp_avg/tiny/E" has shape (Float32)[2 2], want (Float32)[8 24]`, ""},
		{"no such variable", edited(func(s map[string]*tensors.Tensor) { s["exp_avg/tiny/Z"] = step }),
			"does not match the trained variables: unknown [exp_avg/tiny/Z], missing []", ""},
		{"missing moment", edited(func(s map[string]*tensors.Tensor) { delete(s, "exp_avg_sq/tiny/W1") }),
			"unknown [], missing [exp_avg_sq/tiny/W1]", ""},
		{"moments missing after step 0", map[string]*tensors.Tensor{"step": step}, "missing [exp_avg/tiny/E exp_avg_sq/tiny/E", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTrainer()
			before := weights(t, tr.ctx, "tiny")
			err := tr.SetOptimizerState(c.state)
			if c.wantSet != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantSet) {
					t.Fatalf("SetOptimizerState error %v, want %q", err, c.wantSet)
				}
				if d := maxWeightDiff(before, weights(t, tr.ctx, "tiny")); d != 0 {
					t.Fatalf("a refused state still changed the weights by %v", d)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = tr.Step(b)
			if c.wantRun == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			n := tensors.ToScalar[int64](c.state["step"]) + 1
			if err == nil || !strings.Contains(err.Error(), c.wantRun) || !strings.Contains(err.Error(), fmt.Sprintf("grpo step %d", n)) {
				t.Fatalf("Step error %v, want %q at step %d", err, c.wantRun, n)
			}
			if d := maxWeightDiff(before, weights(t, tr.ctx, "tiny")); d != 0 {
				t.Fatalf("a refused state still changed the weights by %v", d)
			}
		})
	}
}

// TestUpdateIterations: with μ = 2 the first iteration's π_old is the current policy (ratio 1,
// nothing clipped) and the second sees the moved policy through the stored π_old.
func TestUpdateIterations(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.NumIterations = 0.05, 0, 0, 2
	ctx := context.New()
	tinyInit(ctx, 2)
	tr, err := NewTrainer(backend(t), ctx, tinyPolicy, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := randomBatch(rand.New(rand.NewPCG(2, 0)), 8)
	before, err := tr.LogProbs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := tr.Update(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 2 || stats[1].Step != 2 {
		t.Fatalf("got %d stats, last step %d; want 2 iterations", len(stats), stats[len(stats)-1].Step)
	}
	if math.Abs(stats[0].MeanRatio-1) > 1e-6 || stats[0].ClipFrac != 0 {
		t.Errorf("iteration 1: mean ratio %v clip %v, want 1 and 0", stats[0].MeanRatio, stats[0].ClipFrac)
	}
	if math.Abs(stats[1].MeanRatio-1) < 1e-4 {
		t.Errorf("iteration 2: mean ratio %v: the policy did not move away from π_old", stats[1].MeanRatio)
	}
	for i := range before {
		for k := range before[i] {
			if b.OldLogProbs[i][k] != before[i][k] {
				t.Fatalf("stored π_old [%d][%d] = %v, want the pre-update log-prob %v", i, k, b.OldLogProbs[i][k], before[i][k])
			}
		}
	}
	// Per-phase diagnostics: randomBatch alternates phases, so each phase has 4 sequences.
	for _, p := range []Phase{PhaseMemory, PhaseJudge} {
		if stats[0].Phase[p].Sequences != 4 {
			t.Errorf("%s: %d sequences, want 4", p, stats[0].Phase[p].Sequences)
		}
	}
	// Rewards are i % 3 for sequence i: memory (even i) 0,2,1,0 → 0.75; judge (odd i) 1,0,2,1 → 1.
	if stats[0].Phase[PhaseMemory].MeanReward != 0.75 || stats[0].Phase[PhaseJudge].MeanReward != 1 {
		t.Errorf("mean rewards per phase %v %v, want 0.75 and 1", stats[0].Phase[PhaseMemory].MeanReward, stats[0].Phase[PhaseJudge].MeanReward)
	}
}

func TestBatchValidation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Beta = 0
	ctx := context.New()
	tinyInit(ctx, 1)
	tr, err := NewTrainer(backend(t), ctx, tinyPolicy, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	base := func() *Batch { return randomBatch(rand.New(rand.NewPCG(9, 9)), 3) }
	cases := []struct {
		name string
		edit func(*Batch)
		want string
	}{
		{"empty", func(b *Batch) { *b = Batch{} }, "empty batch"},
		{"missing advantages", func(b *Batch) { b.Advantages = b.Advantages[:2] }, "disagree on the number of sequences"},
		{"ragged tokens", func(b *Batch) { b.Tokens[1] = b.Tokens[1][:2] }, "sequence 1: tokens/attn_mask have lengths"},
		{"bad phase", func(b *Batch) { b.Phase[2] = 7 }, "sequence 2: unknown phase 7"},
		{"NaN advantage", func(b *Batch) { b.Advantages[0] = float32(math.NaN()) }, "sequence 0: advantage is NaN"},
		{"target at 0", func(b *Batch) { b.TargetPos[0][0] = 0 }, "sequence 0 token 0: target_pos 0 outside"},
		{"target on padding", func(b *Batch) {
			L := len(b.AttnMask[0])
			b.AttnMask[0][L-1], b.TargetPos[0][0], b.LossMask[0][0] = 0, int32(L-1), 1
		}, "target_pos"},
		{"mask 0.5", func(b *Batch) { b.LossMask[1][0] = 0.5 }, "loss_mask must be 0 or 1"},
		{"infinite old log-prob", func(b *Batch) {
			b.OldLogProbs = make([][]float32, 3)
			for i := range b.OldLogProbs {
				b.OldLogProbs[i] = make([]float32, len(b.LossMask[i]))
			}
			b.OldLogProbs[2][0] = float32(math.Inf(-1))
		}, "sequence 2 token 0: old log-prob missing or not finite"},
		{"no counted token", func(b *Batch) {
			for i := range b.LossMask {
				clear(b.LossMask[i])
			}
		}, "no counted completion tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := base()
			c.edit(b)
			_, err := tr.Step(b)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "grpo step 1:") {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
	cfg.Beta = 0.1
	trRef, err := NewTrainer(backend(t), ctx, tinyPolicy, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trRef.Step(base()); err == nil || !strings.Contains(err.Error(), "beta > 0 needs reference log-probs") {
		t.Fatalf("beta > 0 without reference: error %v", err)
	}
	cfg.Beta, cfg.LRSchedule = 0, ScheduleCosine
	if _, err := NewTrainer(backend(t), ctx, tinyPolicy, cfg, 0); err == nil || !strings.Contains(err.Error(), "lr_schedule cosine needs the total number of steps") {
		t.Fatalf("cosine without total steps: error %v", err)
	}
}

func TestNewBatchLayout(t *testing.T) {
	b, err := NewBatch([]Sequence{
		{Prompt: []int32{1, 2}, Completion: []int32{5, 6, 7}, Phase: PhaseMemory, Advantage: 0.5},
		{Prompt: []int32{3}, Completion: []int32{4}, Phase: PhaseJudge, Advantage: -1},
	})
	if err != nil {
		t.Fatal(err)
	}
	// L = 2 + 3 = 5, K = 3; padding target positions are 1.
	want := Batch{
		Tokens:     [][]int32{{1, 2, 5, 6, 7}, {3, 4, 0, 0, 0}},
		AttnMask:   [][]int32{{1, 1, 1, 1, 1}, {1, 1, 0, 0, 0}},
		TargetPos:  [][]int32{{2, 3, 4}, {1, 1, 1}},
		LossMask:   [][]float32{{1, 1, 1}, {1, 0, 0}},
		Advantages: []float32{0.5, -1},
		Phase:      []Phase{PhaseMemory, PhaseJudge},
	}
	for name, pair := range map[string][2]any{
		"tokens": {b.Tokens, want.Tokens}, "attn": {b.AttnMask, want.AttnMask}, "pos": {b.TargetPos, want.TargetPos},
		"mask": {b.LossMask, want.LossMask}, "adv": {b.Advantages, want.Advantages}, "phase": {b.Phase, want.Phase},
	} {
		if got, w := toString(pair[0]), toString(pair[1]); got != w {
			t.Errorf("%s: %s, want %s", name, got, w)
		}
	}
	if _, err := NewBatch([]Sequence{{Completion: []int32{1}}}); err == nil || !strings.Contains(err.Error(), "sequence 0 has an empty prompt") {
		t.Errorf("empty prompt: error %v", err)
	}
}

func toString(x any) string { return strings.TrimSpace(strings.ReplaceAll(fmtAny(x), "\n", " ")) }

func TestBucket(t *testing.T) {
	cases := map[int]int{1: 8, 8: 8, 9: 16, 16: 16, 17: 20, 20: 20, 21: 24, 33: 40, 100: 112, 600: 640, 1000: 1024, 1025: 1280, 8192: 8192}
	for n, want := range cases {
		if got := bucket(n); got != want {
			t.Errorf("bucket(%d) = %d, want %d", n, got, want)
		}
		if got := bucket(n); got < n || float64(got) > math.Max(8, 1.25*float64(n)+8) {
			t.Errorf("bucket(%d) = %d is not within 25%% above n", n, got)
		}
	}
}

// TestPackPadsRows: a micro-batch of 2 sequences padded to 4 rows, L and K cut to their buckets.
func TestPackPadsRows(t *testing.T) {
	b, err := NewBatch([]Sequence{
		{Prompt: []int32{1, 2}, Completion: []int32{5, 6, 7}, Advantage: 0.5},
		{Prompt: []int32{3}, Completion: []int32{4}, Advantage: -1},
		{Prompt: make([]int32, 30), Completion: make([]int32, 12)}, // makes the batch's L 42 and K 12
	})
	if err != nil {
		t.Fatal(err)
	}
	mb := pack(b, []int{0, 1}, 4, 0, false, false, false)
	if mb.R != 4 || mb.L != 8 || mb.K != 8 {
		t.Fatalf("R, L, K = %d, %d, %d; want 4, 8, 8", mb.R, mb.L, mb.K)
	}
	attn := tensors.MustCopyFlatData[int32](mb.attn)
	pos := tensors.MustCopyFlatData[int32](mb.pos)
	mask := tensors.MustCopyFlatData[float32](mb.mask)
	adv := tensors.MustCopyFlatData[float32](mb.adv)
	if toString(attn[:16]) != toString([]int32{1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0}) {
		t.Errorf("attn rows 0-1: %v", attn[:16])
	}
	if toString(pos[:8]) != toString([]int32{2, 3, 4, 1, 1, 1, 1, 1}) || toString(mask[:8]) != toString([]float32{1, 1, 1, 0, 0, 0, 0, 0}) {
		t.Errorf("row 0: pos %v mask %v", pos[:8], mask[:8])
	}
	for r := 2; r < 4; r++ { // padding rows: one token, nothing counted
		if attn[r*8] != 1 || attn[r*8+1] != 0 || mask[r*8] != 0 || pos[r*8] != 1 || adv[r] != 0 {
			t.Errorf("padding row %d: attn %v pos %v mask %v adv %v", r, attn[r*8:r*8+8], pos[r*8:r*8+8], mask[r*8:r*8+8], adv[r])
		}
	}
}

func fmtAny(x any) string { return fmt.Sprint(x) }

// TestShapesAreBucketed: batches of different lengths within one bucket reuse one compiled
// training graph.
func TestShapesAreBucketed(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Beta, cfg.MicroBatchSize = 0, 4
	ctx := context.New()
	tinyInit(ctx, 1)
	tr, err := NewTrainer(backend(t), ctx, tinyPolicy, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, lens := range [][2]int{{1, 1}, {2, 3}, {3, 5}, {1, 7}} { // prompt + completion ≤ 8, completion ≤ 8
		b, err := NewBatch([]Sequence{
			{Prompt: make([]int32, lens[0]), Completion: make([]int32, lens[1]), Advantage: 1},
			{Prompt: []int32{1}, Completion: []int32{2}, Advantage: -1},
			{Prompt: []int32{1, 2}, Completion: []int32{3}, Advantage: 0.5},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Step(b); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if tr.graphsBuilt != 1 {
		t.Fatalf("%d training graphs built for 4 batches of one bucket, want 1", tr.graphsBuilt)
	}
}

// TestFailedMicroBatchLeavesNothingBehind: when the second micro-batch of a step fails, the
// first one's gradient does not leak into the next step.
func TestFailedMicroBatchLeavesNothingBehind(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Beta, cfg.MicroBatchSize, cfg.WarmupSteps, cfg.LearningRate = 0, 1, 0, 0.1
	newRun := func() (*context.Context, *Trainer) {
		ctx := context.New()
		ctx.In("direct").VariableWithValue("w", [][]float32{{-1, -1, -1, -1, -1, -1, -1, -1}})
		ctx.In("direct").VariableWithValue("bias", make([]float32, 8))
		tr, err := NewTrainer(backend(t), ctx, directPolicy, cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		return ctx, tr
	}
	good, err := NewBatch([]Sequence{{Prompt: []int32{1}, Completion: []int32{1, 2, 3}, Advantage: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// The second sequence's 9-token completion makes its micro-batch K = 16, which
	// directPolicy (w is [1, 8]) refuses.
	bad, err := NewBatch([]Sequence{
		{Prompt: []int32{1}, Completion: []int32{1, 2}, Advantage: -1},
		{Prompt: []int32{1}, Completion: make([]int32, 9), Advantage: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, tr := newRun()
	if _, err := tr.Step(bad); err == nil || !strings.Contains(err.Error(), "grpo step 1 micro-batch 1") {
		t.Fatalf("error %v, want a failure in micro-batch 1", err)
	}
	if _, err := tr.Step(good); err != nil {
		t.Fatal(err)
	}
	ctxFresh, trFresh := newRun()
	if _, err := trFresh.Step(good); err != nil {
		t.Fatal(err)
	}
	if d := maxWeightDiff(weights(t, ctx, "direct"), weights(t, ctxFresh, "direct")); d != 0 {
		t.Fatalf("after a failed step, the next differs from a fresh trainer's by %v", d)
	}
}

// BenchmarkStep times one optimizer step of the tiny model on 64 sequences, as one graph and
// as micro-batches of 16 (go test -run '^$' -bench Step ./grpo).
func BenchmarkStep(b *testing.B) {
	for _, mbs := range []int{64, 16} {
		b.Run(fmt.Sprintf("micro_batch_%d", mbs), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Beta, cfg.MicroBatchSize = 0, mbs
			ctx := context.New()
			tinyInit(ctx, 1)
			tr, err := NewTrainer(backend(b), ctx, tinyPolicy, cfg, 0)
			if err != nil {
				b.Fatal(err)
			}
			batch := randomBatch(rand.New(rand.NewPCG(1, 2)), 64)
			if _, err := tr.Step(batch); err != nil { // compile outside the timing
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := tr.Step(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestFrozenCopy: the copy holds the model's variables, not trainable and unchanged by
// training, and none of the trainer's state.
func TestFrozenCopy(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Beta, cfg.LearningRate, cfg.WarmupSteps = 0, 0.01, 0
	ctx := context.New()
	tinyInit(ctx, 1)
	tr, err := NewTrainer(backend(t), ctx, tinyPolicy, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := randomBatch(rand.New(rand.NewPCG(1, 3)), 4)
	if _, err := tr.Step(b); err != nil { // creates the trainer's state variables
		t.Fatal(err)
	}
	ref, err := FrozenCopy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ref.NumVariables() != 6 {
		t.Errorf("copy has %d variables, want the tiny model's 6", ref.NumVariables())
	}
	for v := range ref.IterVariables() {
		if v.Trainable || !strings.HasPrefix(v.Scope(), "/tiny") {
			t.Errorf("copied variable %s: trainable %v", v.ScopeAndName(), v.Trainable)
		}
	}
	before := weights(t, ref, "tiny")
	if d := maxWeightDiff(before, weights(t, ctx, "tiny")); d != 0 {
		t.Fatalf("copy differs from the model by %v", d)
	}
	refLogp, err := tr.LogProbs(ref, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(b); err != nil {
		t.Fatal(err)
	}
	if d := maxWeightDiff(before, weights(t, ref, "tiny")); d != 0 {
		t.Fatalf("training moved the frozen copy by %v", d)
	}
	again, err := tr.LogProbs(ref, b)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := tr.LogProbs(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	same, moved := true, false
	for i := range again {
		for k := range again[i] {
			same = same && again[i][k] == refLogp[i][k]
			moved = moved || cur[i][k] != refLogp[i][k]
		}
	}
	if !same || !moved {
		t.Fatalf("reference log-probs unchanged: %v; policy log-probs moved: %v", same, moved)
	}
}

// TestSkipZeroAdvantage: with β = 0, leaving the zero-advantage sequences out of the forward
// and backward (skip_zero_advantage) gives the loss, gradient norm and weights of running every
// sequence, over two steps with π_old ≠ π_θ; the diagnostics are those of the sequences that
// ran (a step on that sub-batch alone); a batch with no non-zero advantage gives loss 0 and
// leaves the weights where running it in full does.
func TestSkipZeroAdvantage(t *testing.T) {
	for _, tc := range []struct {
		name string
		zero []int // rows whose advantage is set to 0
	}{
		{"some", []int{0, 3, 4, 7, 10}},
		{"all", []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 0))
			cfg := DefaultConfig()
			cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.MicroBatchSize = 0.01, 0, 0, 4
			cfg.AdamEpsilon = 1e-3

			full := context.New()
			tinyInit(full, 3)
			skip, err := full.Clone()
			if err != nil {
				t.Fatal(err)
			}
			start, err := full.Clone()
			if err != nil {
				t.Fatal(err)
			}
			b := randomBatch(rng, 11)
			zero := map[int]bool{}
			for _, i := range tc.zero {
				b.Advantages[i], zero[i] = 0, true
			}
			var kept []int
			for i := range b.Len() {
				if !zero[i] {
					kept = append(kept, i)
				}
			}

			cfg.SkipZeroAdvantage = false
			trFull, err := NewTrainer(backend(t), full, tinyPolicy, cfg, 0)
			if err != nil {
				t.Fatal(err)
			}
			cfg.SkipZeroAdvantage = true
			trSkip, err := NewTrainer(backend(t), skip, tinyPolicy, cfg, 0)
			if err != nil {
				t.Fatal(err)
			}
			logp, err := trFull.LogProbs(full, b)
			if err != nil {
				t.Fatal(err)
			}
			b.OldLogProbs = perturb(rng, logp, b.LossMask, 0.2)

			if len(kept) > 0 { // the diagnostics of the rows that ran: a step on them alone
				cfg.SkipZeroAdvantage = false
				want := stepOnClone(t, start, cfg, b.subset(kept))
				cfg.SkipZeroAdvantage = true
				got := stepOnClone(t, start, cfg, b)
				if math.Abs(got.MeanRatio-want.MeanRatio) > 1e-6 || math.Abs(got.Entropy-want.Entropy) > 1e-5 || got.ClipFrac != want.ClipFrac {
					t.Errorf("diagnostics %v, the rows that ran alone give %v", got, want)
				}
			}

			for step := range 2 {
				sf, err := trFull.Step(b)
				if err != nil {
					t.Fatal(err)
				}
				ss, err := trSkip.Step(b)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(ss.Loss-sf.Loss) > 1e-6 || math.Abs(ss.GradNorm-sf.GradNorm) > 1e-6*max(1, sf.GradNorm) {
					t.Errorf("step %d: skipping gives loss %v grad norm %v, running all %v and %v",
						step+1, ss.Loss, ss.GradNorm, sf.Loss, sf.GradNorm)
				}
				if ss.Sequences != sf.Sequences || ss.Tokens != sf.Tokens {
					t.Errorf("step %d: counts %d/%d, running all %d/%d", step+1, ss.Sequences, ss.Tokens, sf.Sequences, sf.Tokens)
				}
				if step == 0 && len(kept) > 0 && math.Abs(ss.Entropy-sf.Entropy) < 1e-6 {
					t.Errorf("entropy %v with skipping and %v without: did every row run?", ss.Entropy, sf.Entropy)
				}
				if len(kept) == 0 && (sf.Loss != 0 || sf.GradNorm != 0) {
					t.Errorf("step %d: all advantages 0 but loss %v grad norm %v", step+1, sf.Loss, sf.GradNorm)
				}
			}
			if d := maxWeightDiff(weights(t, full, "tiny"), weights(t, skip, "tiny")); d > 1e-6 {
				t.Errorf("weights after 2 steps differ by %.2g", d)
			}
			moved := maxWeightDiff(weights(t, full, "tiny"), weights(t, start, "tiny"))
			if len(kept) > 0 && moved < 1e-3 {
				t.Errorf("weights moved only %.2g: the comparison is vacuous", moved)
			}
			if len(kept) == 0 && moved != 0 {
				t.Errorf("no advantage, yet the weights moved by %.2g", moved)
			}
		})
	}
}

// stepOnClone takes one step on b with cfg from a clone of ctx (ctx is left as it is).
func stepOnClone(t *testing.T, ctx *context.Context, cfg Config, b *Batch) Stats {
	t.Helper()
	c, err := ctx.Clone()
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrainer(backend(t), c, tinyPolicy, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, err := tr.Step(b)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCorrectionMetricsCoverEverySequence: with a rollout correction and β = 0 the correction's
// metrics (weight mean and max, masked share, KL(π_rollout ‖ π_old)) are over every sequence of
// the step, the zero-advantage ones too: skip_zero_advantage on, off, and with the tokens
// recorded give the same figures, and they differ from those of the non-zero rows alone.
func TestCorrectionMetricsCoverEverySequence(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 0))
	cfg := DefaultConfig()
	cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.MicroBatchSize = 0.01, 0, 0, 4
	cfg.RolloutCorrection = CorrectionMIS
	start := context.New()
	tinyInit(start, 3)
	b := randomBatch(rng, 11)
	var kept []int
	for i := range b.Len() {
		if i%3 == 0 {
			b.Advantages[i] = 0
		} else {
			kept = append(kept, i)
		}
	}
	tr, err := NewTrainer(backend(t), start, tinyPolicy, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	logp, err := tr.LogProbs(start, b)
	if err != nil {
		t.Fatal(err)
	}
	b.OldLogProbs = perturb(rng, logp, b.LossMask, 0.2)
	b.RolloutLogProbs = perturb(rng, b.OldLogProbs, b.LossMask, 1.5) // wide: some tokens masked
	for _, row := range b.RolloutLogProbs {
		for k := range row {
			row[k] = min(row[k], 0) // a log-prob
		}
	}

	step := func(skip, record bool, b *Batch) Stats {
		c, err := start.Clone()
		if err != nil {
			t.Fatal(err)
		}
		cfg := cfg
		cfg.SkipZeroAdvantage = skip
		tr, err := NewTrainer(backend(t), c, tinyPolicy, cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		tr.SetRecordTokens(record)
		st, err := tr.Step(b)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	metrics := func(st Stats) [4]float64 {
		return [4]float64{st.RolloutWeightMean, st.RolloutWeightMax, st.RolloutMasked, st.RolloutKL}
	}
	all := metrics(step(false, false, b))
	if all[2] <= 0 || all[2] >= 1 || all[3] <= 0 {
		t.Fatalf("masked share %v, KL %v: want some tokens masked and a positive KL", all[2], all[3])
	}
	for _, tc := range []struct {
		name         string
		skip, record bool
	}{{"skipping", true, false}, {"recording tokens", true, true}} {
		if got := metrics(step(tc.skip, tc.record, b)); got != all {
			t.Errorf("%s: weight mean, max, masked, KL %v; every row run %v", tc.name, got, all)
		}
	}
	if alone := metrics(step(false, false, b.subset(kept))); alone == all {
		t.Errorf("the non-zero rows alone give the same metrics %v: the comparison is vacuous", alone)
	}
}
