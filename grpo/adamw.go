package grpo

// AdamW and the trainer's own state: gradient accumulators and moments, saved and restored
// with the optimizer state.

import (
	"fmt"
	"slices"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph code reads as equations
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
)

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
