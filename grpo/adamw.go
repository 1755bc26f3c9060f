package grpo

// AdamW and the trainer's own state: gradient accumulators and moments, saved and restored
// with the optimizer state.

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph code reads as equations
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
)

// The update runs after a step's micro-batches, as graphs of its own: one computes the
// global norm of the accumulated gradients; then the AdamW update runs group by group
// (Config.UpdateGroupLayers decoder layers a group), each group's graph reading and writing
// only its variables, so that without buffer aliasing a group's new copies are all an update
// adds to the resident state. Grouped or not, the numbers are the same.

// update takes the optimizer step from the accumulated gradients and zeroes them. It returns
// ‖g‖ before clipping; a loss or norm that is not finite is an error and changes nothing.
func (t *Trainer) update(lr, c1, c2 float32, loss float64) (float64, error) {
	normExec, err := t.normExec()
	if err != nil {
		return 0, err
	}
	res, err := normExec.Exec()
	if err != nil {
		return 0, fmt.Errorf("gradient norm: %w", err)
	}
	norm := tensors.ToScalar[float32](res[0])
	res[0].FinalizeAll()
	if math.IsNaN(loss) || math.IsInf(loss, 0) || !finite32(norm) {
		return 0, fmt.Errorf("loss %v, gradient norm %v: not finite; weights and optimizer state left unchanged", loss, norm)
	}
	// The clip scale min(1, max_grad_norm / (‖g‖ + 1e-6)), in float32.
	scale := float32(1)
	if t.cfg.MaxGradNorm > 0 {
		scale = min(scale, float32(t.cfg.MaxGradNorm)/(norm+float32(1e-6)))
	}
	for gi := range t.updateGroups() {
		e, err := t.groupExec(gi)
		if err != nil {
			return 0, err
		}
		out, err := e.Exec(tensors.FromScalar(scale), tensors.FromScalar(lr), tensors.FromScalar(c1), tensors.FromScalar(c2))
		if err != nil {
			return 0, fmt.Errorf("update of group %d: %w", gi, err)
		}
		for _, o := range out {
			o.FinalizeAll()
		}
	}
	return float64(norm), nil
}

// normExec returns the graph of the global norm √(Σ g²) over every accumulator.
func (t *Trainer) normExec() (*context.Exec, error) {
	if t.norm != nil {
		return t.norm, nil
	}
	e, err := context.NewExec(t.backend, reuseIfLoaded(t.ctx), func(ctx *context.Context, g *Graph) *Node {
		sumSq := ScalarZero(g, float32DType)
		for _, v := range t.params {
			sumSq = Add(sumSq, ReduceAllSum(Square(t.stateVariable(ctx, "grad_acc", v).ValueGraph(g))))
		}
		return Sqrt(sumSq)
	})
	if err != nil {
		return nil, err
	}
	t.norm = e
	return e, nil
}

// updateGroups splits the trained variables into update groups, in the order of t.params:
// decoder layer n (a scope holding "/layers/n/") goes to group n / update_group_layers,
// every other variable to a group of its own kind placed first; one group when
// update_group_layers is 0.
func (t *Trainer) updateGroups() [][]*context.Variable {
	if t.groups != nil {
		return t.groups
	}
	n := t.cfg.UpdateGroupLayers
	if n <= 0 {
		t.groups = [][]*context.Variable{t.params}
		return t.groups
	}
	index := map[int]int{} // group key → index in t.groups
	for _, v := range t.params {
		key := -1
		if layer, ok := layerOf(v.Scope()); ok {
			key = layer / n
		}
		i, ok := index[key]
		if !ok {
			i = len(t.groups)
			index[key] = i
			t.groups = append(t.groups, nil)
		}
		t.groups[i] = append(t.groups[i], v)
	}
	return t.groups
}

// layerOf returns n when scope holds the path element "layers" followed by an integer n.
func layerOf(scope string) (int, bool) {
	parts := strings.Split(scope, context.ScopeSeparator)
	for i := 0; i+1 < len(parts); i++ {
		if parts[i] == "layers" {
			if n, err := strconv.Atoi(parts[i+1]); err == nil && n >= 0 {
				return n, true
			}
		}
	}
	return 0, false
}

// groupExec returns the update graph of group gi: inputs scale, lr, c1, c2 (float32 scalars).
func (t *Trainer) groupExec(gi int) (*context.Exec, error) {
	if e, ok := t.groupExecs[gi]; ok {
		return e, nil
	}
	vars := t.updateGroups()[gi]
	e, err := context.NewExec(t.backend, reuseIfLoaded(t.ctx), func(ctx *context.Context, scale, lr, c1, c2 *Node) *Node {
		t.adamW(ctx, scale.Graph(), vars, scale, lr, c1, c2)
		return ScalarZero(scale.Graph(), float32DType) // an Exec returns something
	})
	if err != nil {
		return nil, err
	}
	t.groupExecs[gi] = e
	return e, nil
}

// adamW builds the optimizer update (PyTorch's AdamW) of vars from their accumulated
// full-batch gradients, and zeroes the accumulators:
//
//	g ← acc · scale                                   scale = min(1, max_grad_norm / (‖g‖ + 1e-6)), global
//	m ← β1 m + (1 − β1) g
//	v ← β2 v + (1 − β2) g²
//	θ ← θ − lr · ( (m c1) / (√(v c2) + ε) + wd θ )      c1 = 1/(1 − β1^t), c2 = 1/(1 − β2^t)
//
// with weight decay only on variables of rank ≥ 2. θ is the variable itself, in float32, or
// its float32 master (master_dtype float32, variables of another dtype), which the variable
// then gets rounded to its own dtype.
func (t *Trainer) adamW(ctx *context.Context, g *Graph, vars []*context.Variable, scale, lr, c1, c2 *Node) {
	cfg := t.cfg
	for _, v := range vars {
		acc := t.stateVariable(ctx, "grad_acc", v)
		gr := Mul(acc.ValueGraph(g), scale)
		mVar, vVar := t.stateVariable(ctx, "exp_avg", v), t.stateVariable(ctx, "exp_avg_sq", v)
		m1 := Add(MulScalar(mVar.ValueGraph(g), cfg.AdamBeta1), MulScalar(gr, 1-cfg.AdamBeta1))
		v1 := Add(MulScalar(vVar.ValueGraph(g), cfg.AdamBeta2), MulScalar(Square(gr), 1-cfg.AdamBeta2))
		master := t.masterVariable(ctx, v)
		var theta *Node
		if master != nil {
			theta = master.ValueGraph(g)
		} else {
			theta = ConvertDType(v.ValueGraph(g), float32DType)
		}
		update := Div(Mul(m1, c1), AddScalar(Sqrt(Mul(v1, c2)), cfg.AdamEpsilon))
		if cfg.WeightDecay > 0 && v.Shape().Rank() >= 2 {
			update = Add(update, MulScalar(theta, cfg.WeightDecay))
		}
		theta1 := Sub(theta, Mul(lr, update))
		mVar.SetValueGraph(m1)
		vVar.SetValueGraph(v1)
		if master != nil {
			master.SetValueGraph(theta1)
		}
		v.SetValueGraph(roundTo(theta1, v.DType()))
		acc.SetValueGraph(ZerosLike(acc.ValueGraph(g)))
	}
}

// roundTo converts float32 x to dtype rounding to nearest. A bfloat16 target is first
// rounded to bfloat16's 8 significant bits in float32 (Veltkamp's split: c = x·(2¹⁶+1),
// x − (c − x)… hi = c − (c − x)), so the conversion itself is exact: GoMLX's pure-Go backend
// converts float32 to bfloat16 by truncating the low 16 bits (v0.26), which would move
// weights towards zero at every update.
func roundTo(x *Node, dtype dtypes.DType) *Node {
	if dtype != dtypes.BFloat16 {
		return ConvertDType(x, dtype)
	}
	c := MulScalar(x, 65537)
	return ConvertDType(Sub(c, Sub(c, x)), dtype)
}

// usesMaster reports whether v is updated through a float32 master: master_dtype float32 and
// v of another dtype.
func (t *Trainer) usesMaster(v *context.Variable) bool {
	return t.cfg.MasterDType == "float32" && v.DType() != float32DType
}

// masterVariable returns v's float32 master weight (StateScope/master/…): restored by
// SetOptimizerState, else initialized from v's current value (exactly: bfloat16 values are
// float32 values); nil when v has none (usesMaster).
func (t *Trainer) masterVariable(ctx *context.Context, v *context.Variable) *context.Variable {
	if !t.usesMaster(v) {
		return nil
	}
	c := ctx.Checked(false).InAbsPath(stateScope("master", v))
	if existing := c.GetVariable(v.Name()); existing != nil {
		return existing
	}
	key := stateKey("master", v)
	value, ok := t.pending[key]
	if ok {
		if want := shapes.Make(float32DType, v.Shape().Dimensions...); !value.Shape().Equal(want) {
			panic(fmt.Errorf("grpo: optimizer state %q has shape %s, want %s", key, value.Shape(), want))
		}
		delete(t.pending, key)
	} else {
		w, err := v.Value()
		if err != nil {
			panic(fmt.Errorf("grpo: master weight of %s: %w", v.ScopeAndName(), err))
		}
		if value, err = toFloat32(w); err != nil {
			panic(fmt.Errorf("grpo: master weight of %s: %w", v.ScopeAndName(), err))
		}
	}
	return c.VariableWithValue(v.Name(), value).SetTrainable(false)
}

// toFloat32 returns a float32 copy of a bfloat16 or float32 tensor.
func toFloat32(x *tensors.Tensor) (*tensors.Tensor, error) {
	switch x.DType() {
	case float32DType:
		return x.LocalClone()
	case dtypes.BFloat16:
		src := tensors.MustCopyFlatData[bfloat16.BFloat16](x)
		dst := make([]float32, len(src))
		for i, b := range src {
			dst[i] = b.Float32()
		}
		return tensors.FromFlatDataAndDimensions(dst, x.Shape().Dimensions...), nil
	}
	return nil, fmt.Errorf("dtype %s: want float32 or bfloat16", x.DType())
}

// MasterWeights returns the float32 master weights by their variable's scope and name
// (Variable.ScopeAndName()); empty when the trainer keeps none. A checkpoint's weights are
// written from them (train.checkpoint_dtype), not from the rounded variables.
func (t *Trainer) MasterWeights() (map[string]*tensors.Tensor, error) {
	out := map[string]*tensors.Tensor{}
	for _, p := range t.params {
		mv := t.ctx.InspectVariable(stateScope("master", p), p.Name())
		if mv == nil {
			continue
		}
		value, err := mv.Value()
		if err != nil {
			return nil, fmt.Errorf("grpo: master weight of %s: %w", p.ScopeAndName(), err)
		}
		out[p.ScopeAndName()] = value
	}
	return out, nil
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
// trained variable (or none at all at step 0), and the float32 masters of the variables that
// use them, all or none.
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
	// Masters: all or none (none: a state saved without them; they start from the weights).
	// A float32 variable's master is the variable itself: its entry restores its value.
	var masters, mastersMissing []string
	for _, v := range vars {
		if t.cfg.MasterDType != "float32" {
			break
		}
		key := stateKey("master", v)
		want[key] = true
		if t.pending[key] == nil {
			mastersMissing = append(mastersMissing, key)
		} else {
			masters = append(masters, key)
		}
	}
	if len(masters) > 0 {
		missing = append(missing, mastersMissing...)
	}
	for _, key := range slices.Sorted(maps.Keys(t.pending)) {
		if !want[key] {
			unknown = append(unknown, key)
		}
	}
	if len(missing) > 0 || len(unknown) > 0 {
		return fmt.Errorf("grpo: optimizer state of step %d does not match the trained variables: unknown %v, missing %v", t.step, unknown, missing)
	}
	// Every shape is checked before anything is changed.
	for _, v := range vars {
		for _, kind := range []string{"exp_avg", "exp_avg_sq", "master"} {
			key := stateKey(kind, v)
			if value, ok := t.pending[key]; ok {
				if want := shapes.Make(float32DType, v.Shape().Dimensions...); !value.Shape().Equal(want) {
					return fmt.Errorf("grpo: optimizer state %q has shape %s, want %s", key, value.Shape(), want)
				}
			}
		}
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
// "exp_avg_sq/<scope>/<name>" for each trained variable, and with master_dtype float32
// "master/<scope>/<name>": the float32 master weight (the variable itself when it is float32) —
// plus "step", the optimizer steps taken (int64 scalar). Before the first step it holds only "step" (and any state set with
// SetOptimizerState that has not been used yet).
func (t *Trainer) OptimizerState() (map[string]*tensors.Tensor, error) {
	state := map[string]*tensors.Tensor{"step": tensors.FromScalar(int64(t.step))}
	for k, v := range t.pending {
		state[k] = v
	}
	for _, p := range t.params {
		if t.cfg.MasterDType == "float32" && !t.usesMaster(p) && t.step > 0 {
			// A float32 variable is its own master: saved so that a resume from a checkpoint
			// written in another dtype (train.checkpoint_dtype) is exact.
			value, err := p.Value()
			if err != nil {
				return nil, fmt.Errorf("grpo: weights of %s: %w", p.ScopeAndName(), err)
			}
			clone, err := value.LocalClone()
			if err != nil {
				return nil, fmt.Errorf("grpo: weights of %s: %w", p.ScopeAndName(), err)
			}
			state[stateKey("master", p)] = clone
		}
		for _, kind := range []string{"exp_avg", "exp_avg_sq", "master"} {
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
		if !strings.HasPrefix(k, "exp_avg/") && !strings.HasPrefix(k, "exp_avg_sq/") && !strings.HasPrefix(k, "master/") {
			return fmt.Errorf("grpo: unknown optimizer state entry %q", k)
		}
		t.pending[k] = v
	}
	// Checked against the context's trainable variables now, before any weight is restored:
	// a refused state changes nothing.
	var vars []*context.Variable
	for v := range t.ctx.IterVariables() {
		if v.Trainable && !strings.HasPrefix(v.Scope(), StateScope) {
			vars = append(vars, v)
		}
	}
	if err := t.checkPendingState(vars); err != nil {
		t.step, t.pending = 0, nil
		return err
	}
	return t.restoreWeights()
}

// restoreWeights sets the weights from the restored float32 masters at once, before any
// rollout runs on them: a float32 variable takes its master's value (its own, saved so that a
// checkpoint in another dtype loses nothing) and the entry is used up; a bfloat16 variable
// takes its master rounded as the update rounds it (roundTo), and the master becomes a state
// variable with the first update graph.
func (t *Trainer) restoreWeights() error {
	for _, key := range slices.Sorted(maps.Keys(t.pending)) {
		rest, ok := strings.CutPrefix(key, "master")
		if !ok || !strings.HasPrefix(rest, context.ScopeSeparator) {
			continue
		}
		i := strings.LastIndex(rest, context.ScopeSeparator)
		scope, name := rest[:i], rest[i+1:]
		if scope == "" {
			scope = context.ScopeSeparator
		}
		v := t.ctx.InspectVariable(scope, name)
		if v == nil {
			continue // reported by checkPendingState as unknown
		}
		master := t.pending[key]
		if want := shapes.Make(float32DType, v.Shape().Dimensions...); !master.Shape().Equal(want) {
			return fmt.Errorf("grpo: optimizer state %q has shape %s, want %s", key, master.Shape(), want)
		}
		var value *tensors.Tensor
		switch v.DType() {
		case float32DType:
			clone, err := master.LocalClone() // the variable owns what it is given
			if err != nil {
				return err
			}
			value = clone
			delete(t.pending, key)
		case dtypes.BFloat16:
			m := tensors.MustCopyFlatData[float32](master)
			b := make([]bfloat16.BFloat16, len(m))
			for j, x := range m {
				b[j] = bfloat16.FromFloat32(roundToBF16(x)) // exact: roundToBF16 leaves 8 significant bits
			}
			value = tensors.FromFlatDataAndDimensions(b, v.Shape().Dimensions...)
		default:
			continue
		}
		if err := v.SetValue(value); err != nil {
			return fmt.Errorf("grpo: restore %s from %q: %w", v.ScopeAndName(), key, err)
		}
	}
	return nil
}

// roundToBF16 is roundTo's rounding of a float32 to bfloat16's 8 significant bits, on the
// host, operation for operation (the float32 conversions forbid fused multiply-adds).
func roundToBF16(x float32) float32 {
	c := float32(x * 65537)
	return float32(c - float32(c-x))
}
