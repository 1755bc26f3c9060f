package grpo

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph code reads as equations
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
)

// StateScope is the context scope under which the trainer keeps its own variables (gradient
// accumulators and AdamW moments). A model checkpoint should leave it out.
const StateScope = "/grpo"

// Trainer runs turn-wise GRPO optimizer steps on the trainable variables of a context.
// It holds no random state: the same batches from the same weights and optimizer state give
// the same updates, so a resumed run equals an uninterrupted one.
type Trainer struct {
	cfg        Config
	backend    backends.Backend
	ctx        *context.Context
	policy     PolicyFn
	totalSteps int
	step       int // optimizer steps taken

	trainExecs   map[trainKey]*context.Exec
	logProbExecs map[*context.Context]*context.Exec
	params       []*context.Variable        // the trained variables, fixed by the first training graph
	pending      map[string]*tensors.Tensor // optimizer state set before its variables existed
	graphsBuilt  int                        // training graphs built (one per exec and shape)
}

type trainKey struct{ apply, hasOld, hasRef bool }

// NewTrainer returns a trainer of the trainable variables of ctx used by policy. totalSteps is
// the number of optimizer steps the run will take (needed by the linear and cosine schedules;
// ignored by constant). The optimizer state starts empty at step 0.
func NewTrainer(backend backends.Backend, ctx *context.Context, policy PolicyFn, cfg Config, totalSteps int) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("grpo: %w", err)
	}
	if cfg.LRSchedule != ScheduleConstant && totalSteps <= 0 {
		return nil, fmt.Errorf("grpo: lr_schedule %s needs the total number of steps, got %d", cfg.LRSchedule, totalSteps)
	}
	return &Trainer{
		cfg: cfg, backend: backend, ctx: ctx, policy: policy, totalSteps: totalSteps,
		trainExecs:   map[trainKey]*context.Exec{},
		logProbExecs: map[*context.Context]*context.Exec{},
	}, nil
}

// Steps returns the number of optimizer steps taken (restored by SetOptimizerState).
func (t *Trainer) Steps() int { return t.step }

// Stats are the diagnostics of one optimizer step.
type Stats struct {
	Step      int     // optimizer steps taken, this one included
	LR        float64 // learning rate of this step
	Loss      float64 // the full-batch loss
	GradNorm  float64 // global gradient norm before clipping
	Sequences int     // sequences with at least one counted token
	Tokens    int     // counted completion tokens
	ClipFrac  float64 // fraction of counted tokens whose clipped term was the active one
	MeanRatio float64 // mean ρ = π_θ/π_old over counted tokens
	MeanKL    float64 // mean k3 KL to the reference over counted tokens (0 without reference log-probs)
	Entropy   float64 // mean −log π_θ of the counted (sampled) tokens: a Monte-Carlo estimate of the entropy
	Phase     [NumPhases]PhaseStats
}

// PhaseStats are the diagnostics of one phase's sequences in a step.
type PhaseStats struct {
	Sequences     int
	Tokens        int
	MeanReward    float64 // mean of Batch.Rewards (0 when not given)
	MeanAdvantage float64
	ClipFrac      float64
	MeanRatio     float64
	MeanKL        float64
}

// String renders the stats as one log line.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d lr %.3g loss %.4f grad_norm %.4f seqs %d tokens %d clip %.3f ratio %.4f kl %.4g entropy %.3f",
		s.Step, s.LR, s.Loss, s.GradNorm, s.Sequences, s.Tokens, s.ClipFrac, s.MeanRatio, s.MeanKL, s.Entropy)
	for p := range NumPhases {
		ps := s.Phase[p]
		if ps.Sequences > 0 {
			fmt.Fprintf(&b, " | %s reward %.3f seqs %d", Phase(p), ps.MeanReward, ps.Sequences)
		}
	}
	return b.String()
}

// Update runs num_iterations (μ) optimizer steps on one rollout batch. With μ > 1 and no
// OldLogProbs, it first fills b.OldLogProbs with the current policy's log-probs: π_old is the
// policy that generated the rollouts, i.e. the current weights. With μ = 1 they are not needed
// (the ratio is 1 and still carries the gradient).
func (t *Trainer) Update(b *Batch) ([]Stats, error) {
	if t.cfg.NumIterations > 1 && b.OldLogProbs == nil {
		old, err := t.LogProbs(t.ctx, b)
		if err != nil {
			return nil, fmt.Errorf("grpo step %d: old log-probs: %w", t.step+1, err)
		}
		b.OldLogProbs = old
	}
	var all []Stats
	for range t.cfg.NumIterations {
		s, err := t.Step(b)
		if err != nil {
			return all, err
		}
		all = append(all, s)
	}
	return all, nil
}

// Step runs one optimizer step on b: forward and backward over micro-batches of
// micro_batch_size sequences, gradient accumulation, global-norm clipping and AdamW on the
// trained variables. A loss or gradient that is not finite is an error naming the step, and
// leaves the weights and optimizer state unchanged.
func (t *Trainer) Step(b *Batch) (Stats, error) {
	n := t.step + 1
	hasRef := b.RefLogProbs != nil
	if err := b.validate(t.cfg.Beta > 0); err != nil {
		return Stats{}, fmt.Errorf("grpo step %d: %w", n, err)
	}
	st := Stats{Step: n, LR: LearningRate(t.cfg, t.step, t.totalSteps)}
	seqTokens := make([]int, b.Len())
	for i, row := range b.LossMask {
		for _, m := range row {
			seqTokens[i] += int(m)
		}
		if seqTokens[i] > 0 {
			st.Sequences++
		}
		st.Tokens += seqTokens[i]
	}
	if st.Tokens == 0 {
		return Stats{}, fmt.Errorf("grpo step %d: the batch has no counted completion tokens", n)
	}
	denom := float32(st.Sequences)
	if t.cfg.LossAggregation == AggTokenMean {
		denom = float32(st.Tokens)
	}

	// Adam's bias corrections 1/(1−β^t), computed here in float64.
	c1 := float32(1 / (1 - math.Pow(t.cfg.AdamBeta1, float64(n))))
	c2 := float32(1 / (1 - math.Pow(t.cfg.AdamBeta2, float64(n))))

	var seqRatio, seqKL, seqClip, seqNegLogP []float64
	chunks := t.chunks(b.Len())
	for ci, rows := range chunks {
		key := trainKey{apply: ci == len(chunks)-1, hasOld: b.OldLogProbs != nil, hasRef: hasRef}
		mb := pack(b, rows, t.rowsPerMicroBatch(b.Len()), key.hasOld, key.hasRef)
		args := mb.args()
		args = append(args, tensors.FromScalar(denom))
		if key.apply {
			args = append(args, tensors.FromScalar(float32(st.LR)), tensors.FromScalar(c1), tensors.FromScalar(c2))
		}
		exec, err := t.trainExec(key)
		if err != nil {
			return Stats{}, fmt.Errorf("grpo step %d: %w", n, err)
		}
		outs, err := exec.Exec(args...)
		mb.finalize()
		if err != nil {
			if rerr := t.resetAccumulators(); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return Stats{}, fmt.Errorf("grpo step %d micro-batch %d: %w", n, ci, err)
		}
		st.Loss += float64(tensors.ToScalar[float32](outs[0]))
		seqRatio = append(seqRatio, rowsOf(outs[1], len(rows))...)
		seqKL = append(seqKL, rowsOf(outs[2], len(rows))...)
		seqClip = append(seqClip, rowsOf(outs[3], len(rows))...)
		seqNegLogP = append(seqNegLogP, rowsOf(outs[4], len(rows))...)
		if key.apply {
			st.GradNorm = float64(tensors.ToScalar[float32](outs[5]))
		}
		for _, o := range outs {
			o.FinalizeAll()
		}
	}
	if math.IsNaN(st.Loss) || math.IsInf(st.Loss, 0) || math.IsNaN(st.GradNorm) || math.IsInf(st.GradNorm, 0) {
		return Stats{}, fmt.Errorf("grpo step %d: loss %v, gradient norm %v: not finite; weights and optimizer state left unchanged", n, st.Loss, st.GradNorm)
	}
	t.step = n

	// Diagnostics: token means overall and per phase.
	var ratio, kl, clip, negLogP float64
	var phaseSums [NumPhases]struct{ reward, adv, ratio, kl, clip float64 }
	for i := range b.Len() {
		ratio += seqRatio[i]
		kl += seqKL[i]
		clip += seqClip[i]
		negLogP += seqNegLogP[i]
		if seqTokens[i] == 0 {
			continue
		}
		p := b.Phase[i]
		ps := &st.Phase[p]
		ps.Sequences++
		ps.Tokens += seqTokens[i]
		if b.Rewards != nil {
			phaseSums[p].reward += float64(b.Rewards[i])
		}
		phaseSums[p].adv += float64(b.Advantages[i])
		phaseSums[p].ratio += seqRatio[i]
		phaseSums[p].kl += seqKL[i]
		phaseSums[p].clip += seqClip[i]
	}
	tok := float64(st.Tokens)
	st.MeanRatio, st.MeanKL, st.ClipFrac, st.Entropy = ratio/tok, kl/tok, clip/tok, negLogP/tok
	for p := range NumPhases {
		ps := &st.Phase[p]
		if ps.Sequences == 0 {
			continue
		}
		s, tk := float64(ps.Sequences), float64(ps.Tokens)
		ps.MeanReward, ps.MeanAdvantage = phaseSums[p].reward/s, phaseSums[p].adv/s
		ps.MeanRatio, ps.MeanKL, ps.ClipFrac = phaseSums[p].ratio/tk, phaseSums[p].kl/tk, phaseSums[p].clip/tk
	}
	return st, nil
}

// LogProbs returns log π(TargetPos) [B][K] of b's sequences under the policy with the
// variables of ctx: the trainer's own context gives π_old, a reference context (FrozenCopy of
// the starting model) gives π_ref. Entries whose LossMask is 0 are 0. Each distinct ctx value
// gets its own compiled graphs: pass the same *context.Context every time.
func (t *Trainer) LogProbs(ctx *context.Context, b *Batch) ([][]float32, error) {
	if err := b.validate(false); err != nil {
		return nil, err
	}
	exec, ok := t.logProbExecs[ctx]
	if !ok {
		var err error
		exec, err = context.NewExec(t.backend, reuseIfLoaded(ctx), func(ctx *context.Context, tokens, attn, pos *Node) *Node {
			return ConvertDType(t.callPolicy(ctx, tokens, attn, pos), float32DType)
		})
		if err != nil {
			return nil, err
		}
		exec.SetMaxCache(maxCompiledShapes)
		t.logProbExecs[ctx] = exec
	}
	K := len(b.TargetPos[0])
	out := make([][]float32, b.Len())
	for _, rows := range t.chunks(b.Len()) {
		mb := pack(b, rows, t.rowsPerMicroBatch(b.Len()), false, false)
		res, err := exec.Exec(mb.tokens, mb.attn, mb.pos)
		mb.finalize()
		if err != nil {
			return nil, err
		}
		flat := tensors.MustCopyFlatData[float32](res[0])
		res[0].FinalizeAll()
		for r, i := range rows {
			out[i] = make([]float32, K)
			for k := range min(K, mb.K) {
				if b.LossMask[i][k] == 0 {
					continue
				}
				v := flat[r*mb.K+k]
				if !finite32(v) {
					return nil, fmt.Errorf("sequence %d token %d: log-prob is %v", i, k, v)
				}
				out[i][k] = v
			}
		}
	}
	return out, nil
}

// FrozenCopy returns a new context holding copies of ctx's variables, not trainable, without
// the trainer's own state (StateScope): the frozen reference policy π_ref for LogProbs. With
// beta = 0 no reference is needed.
func FrozenCopy(ctx *context.Context) (*context.Context, error) {
	ref := context.New()
	for v := range ctx.IterVariables() {
		if v.Scope() == StateScope || strings.HasPrefix(v.Scope(), StateScope+context.ScopeSeparator) {
			continue
		}
		c, err := v.CloneToContext(ref)
		if err != nil {
			return nil, fmt.Errorf("grpo: copy variable %s: %w", v.ScopeAndName(), err)
		}
		c.SetTrainable(false)
	}
	return ref, nil
}

// maxCompiledShapes bounds each exec's cache of compiled graphs (GoMLX's default is 32).
const maxCompiledShapes = 128

// reuseIfLoaded marks ctx for reuse when its variables already exist, so a policy building a
// second graph (another shape or exec) finds its variables instead of creating them.
func reuseIfLoaded(ctx *context.Context) *context.Context {
	if ctx.NumVariables() > 0 {
		return ctx.Reuse()
	}
	return ctx
}

func (t *Trainer) trainExec(key trainKey) (*context.Exec, error) {
	if e, ok := t.trainExecs[key]; ok {
		return e, nil
	}
	e, err := context.NewExec(t.backend, reuseIfLoaded(t.ctx), func(ctx *context.Context, in []*Node) []*Node {
		return t.trainGraph(ctx, key, in)
	})
	if err != nil {
		return nil, err
	}
	e.SetMaxCache(maxCompiledShapes)
	t.trainExecs[key] = e
	return e, nil
}

// trainGraph builds one micro-batch's forward and backward pass, adds the gradients to the
// accumulators and, for the step's last micro-batch (key.apply), clips and applies AdamW.
// Inputs: tokens, attn, pos, mask, adv, [old], [ref], denom, [lr, c1, c2].
// Outputs: loss, seqRatio, seqKL, seqClipped, seqNegLogP, [gradNorm].
func (t *Trainer) trainGraph(ctx *context.Context, key trainKey, in []*Node) []*Node {
	g := in[0].Graph()
	t.graphsBuilt++
	ctx.SetTraining(g, true)
	tokens, attn, pos, mask, adv := in[0], in[1], in[2], in[3], in[4]
	next := 5
	logp := ConvertDType(t.callPolicy(ctx, tokens, attn, pos), float32DType) // [B, K]
	old := StopGradient(logp)                                                // μ = 1: ρ = 1, gradient kept
	if key.hasOld {
		old, next = in[next], next+1
	}
	var ref *Node
	if key.hasRef {
		ref, next = in[next], next+1
	}
	denom := in[next]
	next++
	obj := buildObjective(t.cfg, logp, old, ref, mask, adv, denom)

	params := t.trainedVariables(ctx, g)
	values := make([]*Node, len(params))
	for i, v := range params {
		values[i] = v.ValueGraph(g)
	}
	grads := Gradient(obj.Loss, values...)
	for i, v := range params {
		acc := t.stateVariable(ctx, "grad_acc", v)
		grads[i] = Add(acc.ValueGraph(g), ConvertDType(grads[i], float32DType))
		if key.apply {
			acc.SetValueGraph(ZerosLike(grads[i]))
		} else {
			acc.SetValueGraph(grads[i])
		}
	}
	outs := []*Node{obj.Loss, obj.SeqRatio, obj.SeqKL, obj.SeqClipped, obj.SeqNegLogP}
	if key.apply {
		lr, c1, c2 := in[next], in[next+1], in[next+2]
		outs = append(outs, t.adamW(ctx, g, params, grads, lr, c1, c2))
	}
	return outs
}

// callPolicy calls the policy, turning a panic with a non-error value into an error panic:
// GoMLX's executors return error panics as errors but re-raise anything else.
func (t *Trainer) callPolicy(ctx *context.Context, tokens, attn, pos *Node) (logp *Node) {
	defer func() {
		if r := recover(); r != nil {
			if err, ok := r.(error); ok {
				panic(err)
			}
			panic(fmt.Errorf("policy: %v", r))
		}
	}()
	logp = t.policy(ctx, tokens, attn, pos)
	if want := pos.Shape().Dimensions; logp.Rank() != 2 || logp.Shape().Dim(0) != want[0] || logp.Shape().Dim(1) != want[1] {
		panic(fmt.Errorf("policy returned log-probs shaped %s, want [%d %d]", logp.Shape(), want[0], want[1]))
	}
	return logp
}

// resetAccumulators zeroes the gradient accumulators, so that a step that failed halfway
// leaves nothing behind for the next one.
func (t *Trainer) resetAccumulators() error {
	for _, p := range t.params {
		acc := t.ctx.InspectVariable(stateScope("grad_acc", p), p.Name())
		if acc == nil {
			continue
		}
		if err := acc.SetValue(tensors.FromShape(acc.Shape())); err != nil {
			return fmt.Errorf("reset gradient accumulator of %s: %w", p.ScopeAndName(), err)
		}
	}
	return nil
}

// trainedVariables returns the trainable variables the policy used in g, and checks they are
// the same in every training graph (the optimizer state is keyed by them).
func (t *Trainer) trainedVariables(ctx *context.Context, g *Graph) []*context.Variable {
	var vars []*context.Variable
	for v := range ctx.IterVariables() {
		if v.Trainable && v.InUseByGraph(g) {
			vars = append(vars, v)
		}
	}
	if len(vars) == 0 {
		panic(errors.New("grpo: the policy uses no trainable variable"))
	}
	if t.params == nil {
		if err := t.checkPendingState(vars); err != nil {
			panic(err)
		}
		t.params = vars
	} else if !slices.Equal(vars, t.params) {
		panic(fmt.Errorf("grpo: the policy's trainable variables changed between graphs (%d, then %d)", len(t.params), len(vars)))
	}
	return vars
}

// checkPendingState checks that a restored optimizer state has exactly the two moments of each
// trained variable (or none at all at step 0).
func (t *Trainer) checkPendingState(vars []*context.Variable) error {
	if len(t.pending) == 0 && t.step == 0 {
		return nil
	}
	want := map[string]bool{}
	var missing, unknown []string
	for _, v := range vars {
		for _, kind := range []string{"exp_avg", "exp_avg_sq"} {
			key := stateKey(kind, v)
			want[key] = true
			if t.pending[key] == nil {
				missing = append(missing, key)
			}
		}
	}
	for _, key := range sortedKeys(t.pending) {
		if !want[key] {
			unknown = append(unknown, key)
		}
	}
	if len(missing) > 0 || len(unknown) > 0 {
		return fmt.Errorf("grpo: optimizer state of step %d does not match the trained variables: unknown %v, missing %v", t.step, unknown, missing)
	}
	return nil
}

// stateVariable returns the float32 state variable kind ("grad_acc", "exp_avg", "exp_avg_sq")
// of the trained variable v: StateScope/kind/<v's scope>/<v's name>, zero-initialized unless
// SetOptimizerState gave it a value.
func (t *Trainer) stateVariable(ctx *context.Context, kind string, v *context.Variable) *context.Variable {
	c := ctx.Checked(false).InAbsPath(stateScope(kind, v)).WithInitializer(initializers.Zero)
	shape := shapes.Make(float32DType, v.Shape().Dimensions...)
	key := stateKey(kind, v)
	if value, ok := t.pending[key]; ok {
		if !value.Shape().Equal(shape) {
			panic(fmt.Errorf("grpo: optimizer state %q has shape %s, want %s", key, value.Shape(), shape))
		}
		delete(t.pending, key)
		return c.VariableWithValue(v.Name(), value).SetTrainable(false)
	}
	return c.VariableWithShape(v.Name(), shape).SetTrainable(false)
}

// stateScope is the scope of v's state variable of the given kind.
func stateScope(kind string, v *context.Variable) string {
	return StateScope + "/" + kind + strings.TrimSuffix(v.Scope(), context.ScopeSeparator)
}

// stateKey names a state tensor: kind + the variable's scope and name, e.g. "exp_avg/model/layer_0/wq".
func stateKey(kind string, v *context.Variable) string {
	return kind + strings.TrimSuffix(v.Scope(), context.ScopeSeparator) + context.ScopeSeparator + v.Name()
}

// adamW builds the optimizer update (PyTorch's AdamW) from the full-batch gradients:
//
//	g ← g · min(1, max_grad_norm / (‖g‖ + 1e-6))        global norm over all variables
//	m ← β1 m + (1 − β1) g
//	v ← β2 v + (1 − β2) g²
//	θ ← θ − lr · ( (m c1) / (√(v c2) + ε) + wd θ )      c1 = 1/(1 − β1^t), c2 = 1/(1 − β2^t)
//
// with weight decay only on variables of rank ≥ 2. If ‖g‖ is not finite nothing changes.
// It returns ‖g‖ before clipping.
func (t *Trainer) adamW(ctx *context.Context, g *Graph, params []*context.Variable, grads []*Node, lr, c1, c2 *Node) *Node {
	cfg := t.cfg
	sumSq := ScalarZero(g, float32DType)
	for _, gr := range grads {
		sumSq = Add(sumSq, ReduceAllSum(Square(gr)))
	}
	norm := Sqrt(sumSq)
	scale := ScalarOne(g, float32DType)
	if cfg.MaxGradNorm > 0 {
		scale = Min(scale, Div(Scalar(g, float32DType, cfg.MaxGradNorm), AddScalar(norm, 1e-6)))
	}
	ok := IsFinite(norm)
	for i, v := range params {
		gr := Mul(grads[i], scale)
		mVar, vVar := t.stateVariable(ctx, "exp_avg", v), t.stateVariable(ctx, "exp_avg_sq", v)
		m0, v0 := mVar.ValueGraph(g), vVar.ValueGraph(g)
		m1 := Add(MulScalar(m0, cfg.AdamBeta1), MulScalar(gr, 1-cfg.AdamBeta1))
		v1 := Add(MulScalar(v0, cfg.AdamBeta2), MulScalar(Square(gr), 1-cfg.AdamBeta2))
		theta := ConvertDType(v.ValueGraph(g), float32DType)
		update := Div(Mul(m1, c1), AddScalar(Sqrt(Mul(v1, c2)), cfg.AdamEpsilon))
		if cfg.WeightDecay > 0 && v.Shape().Rank() >= 2 {
			update = Add(update, MulScalar(theta, cfg.WeightDecay))
		}
		theta1 := Sub(theta, Mul(lr, update))
		mVar.SetValueGraph(Where(ok, m1, m0))
		vVar.SetValueGraph(Where(ok, v1, v0))
		v.SetValueGraph(ConvertDType(Where(ok, theta1, theta), v.DType()))
	}
	return norm
}

// OptimizerState returns the AdamW state as named float32 tensors — "exp_avg/<scope>/<name>" and
// "exp_avg_sq/<scope>/<name>" for each trained variable — plus "step", the optimizer steps
// taken (int64 scalar). Before the first step it holds only "step" (and any state set with
// SetOptimizerState that has not been used yet).
func (t *Trainer) OptimizerState() (map[string]*tensors.Tensor, error) {
	state := map[string]*tensors.Tensor{"step": tensors.FromScalar(int64(t.step))}
	for k, v := range t.pending {
		state[k] = v
	}
	for _, p := range t.params {
		for _, kind := range []string{"exp_avg", "exp_avg_sq"} {
			sv := t.ctx.InspectVariable(stateScope(kind, p), p.Name())
			if sv == nil {
				continue // no step taken yet
			}
			value, err := sv.Value()
			if err != nil {
				return nil, fmt.Errorf("grpo: optimizer state %s: %w", stateKey(kind, p), err)
			}
			clone, err := value.LocalClone()
			if err != nil {
				return nil, fmt.Errorf("grpo: optimizer state %s: %w", stateKey(kind, p), err)
			}
			state[stateKey(kind, p)] = clone
		}
	}
	return state, nil
}

// SetOptimizerState restores a state saved by OptimizerState (e.g. for --resume). Call it
// before the first Step of a fresh trainer; the moments are checked against the trained
// variables when the first training graph is built.
func (t *Trainer) SetOptimizerState(state map[string]*tensors.Tensor) error {
	if t.params != nil {
		return fmt.Errorf("grpo: SetOptimizerState after training started")
	}
	stepT, ok := state["step"]
	if !ok || stepT.Shape().Size() != 1 {
		return fmt.Errorf("grpo: optimizer state has no scalar \"step\"")
	}
	var step int64
	switch v := stepT.Value().(type) {
	case int64:
		step = v
	case int32:
		step = int64(v)
	default:
		return fmt.Errorf("grpo: optimizer state \"step\" has dtype %s, want int64", stepT.DType())
	}
	if step < 0 {
		return fmt.Errorf("grpo: optimizer state \"step\" is %d", step)
	}
	t.step = int(step)
	t.pending = map[string]*tensors.Tensor{}
	for k, v := range state {
		if k == "step" {
			continue
		}
		if !strings.HasPrefix(k, "exp_avg/") && !strings.HasPrefix(k, "exp_avg_sq/") {
			return fmt.Errorf("grpo: unknown optimizer state entry %q", k)
		}
		t.pending[k] = v
	}
	return nil
}

func sortedKeys(m map[string]*tensors.Tensor) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// rowsPerMicroBatch is the fixed number of rows R of every micro-batch graph: micro_batch_size,
// or the batch rounded up to a power of two when it is smaller.
func (t *Trainer) rowsPerMicroBatch(B int) int {
	return min(t.cfg.MicroBatchSize, 1<<bits.Len(uint(max(B, 1)-1)))
}

// chunks splits sequence indices 0..B−1 into consecutive micro-batches.
func (t *Trainer) chunks(B int) [][]int {
	R := t.rowsPerMicroBatch(B)
	var out [][]int
	for start := 0; start < B; start += R {
		rows := make([]int, 0, R)
		for i := start; i < min(B, start+R); i++ {
			rows = append(rows, i)
		}
		out = append(out, rows)
	}
	return out
}

// bucket rounds a length up to 8, 16, then steps of a quarter of the power of two below it
// (≤ 25% padding), so a run compiles few distinct shapes.
func bucket(n int) int {
	if n <= 16 {
		if n <= 8 {
			return 8
		}
		return 16
	}
	step := (1 << (bits.Len(uint(n-1)) - 1)) / 4
	return (n + step - 1) / step * step
}

// microBatch holds one micro-batch as tensors of R rows, L and K padded to buckets.
type microBatch struct {
	R, L, K             int
	tokens, attn, pos   *tensors.Tensor // int32 [R, L], [R, L], [R, K]
	mask, adv, old, ref *tensors.Tensor // float32 [R, K], [R], [R, K], [R, K]
	hasOld, hasRef      bool
}

// finalize frees the micro-batch's tensors (on the device too) once they have been used.
func (mb *microBatch) finalize() {
	for _, x := range []*tensors.Tensor{mb.tokens, mb.attn, mb.pos, mb.mask, mb.adv, mb.old, mb.ref} {
		if x != nil {
			x.FinalizeAll()
		}
	}
}

func (mb *microBatch) args() []any {
	args := []any{mb.tokens, mb.attn, mb.pos, mb.mask, mb.adv}
	if mb.hasOld {
		args = append(args, mb.old)
	}
	if mb.hasRef {
		args = append(args, mb.ref)
	}
	return args
}

// pack lays out the rows of b as a micro-batch of R rows. L is cut after the last token of its
// rows and K after their last counted entry, both rounded up by bucket. Padding rows hold one
// token (attn_mask[0] = 1) so that every row stays finite in any model; all their entries have
// loss mask 0 and target position 1.
func pack(b *Batch, rows []int, R int, withOld, withRef bool) microBatch {
	L, K := 2, 1
	for _, i := range rows {
		for p := len(b.AttnMask[i]) - 1; p >= 0; p-- {
			if b.AttnMask[i][p] != 0 {
				L = max(L, p+1)
				break
			}
		}
		for k := len(b.LossMask[i]) - 1; k >= 0; k-- {
			if b.LossMask[i][k] != 0 {
				K = max(K, k+1)
				break
			}
		}
	}
	L, K = bucket(L), bucket(K)
	mb := microBatch{R: R, L: L, K: K, hasOld: withOld, hasRef: withRef}
	tokens, attn, pos := make([]int32, R*L), make([]int32, R*L), make([]int32, R*K)
	mask, adv := make([]float32, R*K), make([]float32, R)
	var old, ref []float32
	if withOld {
		old = make([]float32, R*K)
	}
	if withRef {
		ref = make([]float32, R*K)
	}
	for r := range R {
		attn[r*L] = 1
		for k := range K {
			pos[r*K+k] = 1
		}
		if r >= len(rows) {
			continue
		}
		i := rows[r]
		n := min(L, len(b.Tokens[i]))
		copy(tokens[r*L:r*L+n], b.Tokens[i][:n])
		copy(attn[r*L:r*L+n], b.AttnMask[i][:n])
		adv[r] = b.Advantages[i]
		for k := range min(K, len(b.LossMask[i])) {
			if b.LossMask[i][k] == 0 {
				continue
			}
			pos[r*K+k], mask[r*K+k] = b.TargetPos[i][k], 1
			if withOld {
				old[r*K+k] = b.OldLogProbs[i][k]
			}
			if withRef {
				ref[r*K+k] = b.RefLogProbs[i][k]
			}
		}
	}
	mb.tokens = tensors.FromFlatDataAndDimensions(tokens, R, L)
	mb.attn = tensors.FromFlatDataAndDimensions(attn, R, L)
	mb.pos = tensors.FromFlatDataAndDimensions(pos, R, K)
	mb.mask = tensors.FromFlatDataAndDimensions(mask, R, K)
	mb.adv = tensors.FromFlatDataAndDimensions(adv, R)
	if withOld {
		mb.old = tensors.FromFlatDataAndDimensions(old, R, K)
	}
	if withRef {
		mb.ref = tensors.FromFlatDataAndDimensions(ref, R, K)
	}
	return mb
}

// rowsOf returns the first n values of a float32 [R] tensor.
func rowsOf(t *tensors.Tensor, n int) []float64 {
	flat := tensors.MustCopyFlatData[float32](t)
	out := make([]float64, n)
	for i := range n {
		out[i] = float64(flat[i])
	}
	return out
}
