package grpo

// Activation checkpointing per stage (Config.GradientCheckpointing). GoMLX v0.26 has no
// rematerialization op, and a recomputation inside one graph is what a compiler merges back
// into the forward (common-subexpression elimination), so each stage of the policy runs as a
// graph of its own and only the states between stages stay alive:
//
//	forward:   s₀ = Embed(in);  sᵢ₊₁ = Layerᵢ(sᵢ)                     one graph each, no gradient
//	head:      loss(Head(s_L)) → its diagnostics, ∂loss/∂s_L, and the head's weights' gradients
//	backward:  for i = L−1 … 0:  Layerᵢ(sᵢ) again, then the gradient of ⟨Layerᵢ(sᵢ), ∂loss/∂sᵢ₊₁⟩
//	           with respect to sᵢ (∂loss/∂sᵢ) and layer i's weights
//	           Embed(in) again, the gradient of ⟨s₀, ∂loss/∂s₀⟩ with respect to its weights
//
// Every weight gradient is added to its accumulator in the graph that computes it; the update
// then runs as without checkpointing. A step keeps L+1 states (a layer's input each) and one
// stage's activations at a time, instead of every layer's activations.

import (
	"fmt"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph code reads as equations
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// StagedPolicy is a policy split into stages for activation checkpointing: chaining Embed,
// the Layers and Head must compute the PolicyFn (or, with a prefix, the SharedPolicyFn). A
// state is a list of tensors whose shapes do not depend on the stage.
type StagedPolicy struct {
	Layers int // stages between Embed and Head
	Embed  func(ctx *context.Context, in StageInputs) []*Node
	Layer  func(ctx *context.Context, i int, state []*Node, in StageInputs) []*Node
	Head   func(ctx *context.Context, state []*Node, in StageInputs, targetPos *Node) *Node
}

// StageInputs are what every stage may read: the rows' tokens and attention mask [R, L]
// (int32), and with a shared prefix, the prefix and its mask [1, P] (nil otherwise).
type StageInputs struct {
	Prefix, PrefixMask, Tokens, AttnMask *Node
}

// SetStagedPolicy gives the trainer the staged form of its policy, which
// Config.GradientCheckpointing runs. Call it before the first step.
func (t *Trainer) SetStagedPolicy(sp StagedPolicy) { t.staged = &sp }

// stageKey picks a stage graph: which stage (-1 the embedding, Layers the head), forward or
// backward, and whether a prefix is shared; the head's also whether old/ref/rollout are inputs
// and whether it returns per-token values.
type stageKey struct {
	stage                              int
	backward, shared                   bool
	hasOld, hasRef, hasRollout, tokens bool
}

// stageArgs lays out a stage graph's inputs: the micro-batch's prefix (when shared), tokens and
// attention mask, then extra (states, cotangents, objective inputs).
func stageArgs(mb *microBatch, extra ...any) []any {
	var args []any
	if mb.shared() {
		args = append(args, mb.prefix, mb.prefixMask)
	}
	return append(append(args, mb.tokens, mb.attn), extra...)
}

// readStageInputs reads the inputs stageArgs lays out, returning the rest.
func readStageInputs(shared bool, in []*Node) (StageInputs, []*Node) {
	var si StageInputs
	if shared {
		si.Prefix, si.PrefixMask, in = in[0], in[1], in[2:]
	}
	si.Tokens, si.AttnMask = in[0], in[1]
	return si, in[2:]
}

// stageExec returns the graph of a stage (stageGraph).
func (t *Trainer) stageExec(key stageKey) (*context.Exec, error) {
	if e, ok := t.stageExecs[key]; ok {
		return e, nil
	}
	e, err := context.NewExec(t.backend, reuseIfLoaded(t.ctx), func(ctx *context.Context, in []*Node) []*Node {
		return t.stageGraph(ctx, key, in)
	})
	if err != nil {
		return nil, err
	}
	e.SetMaxCache(maxCompiledShapes)
	t.stageExecs[key] = e
	return e, nil
}

// stageGraph builds one stage. Inputs: stageArgs, then
//
//	embed forward:  —                          → s₀
//	layer forward:  sᵢ                         → sᵢ₊₁
//	head:           s_L, mask, adv, [old], [ref], denom → loss, seqRatio, seqKL, seqClipped, seqNegLogP, ∂s_L
//	layer backward: sᵢ, ∂sᵢ₊₁                  → ∂sᵢ
//	embed backward: ∂s₀                        → a scalar (weights' gradients only)
//
// with n = len(state) tensors per state, the head and backward graphs accumulating their
// weights' gradients.
func (t *Trainer) stageGraph(ctx *context.Context, key stageKey, in []*Node) []*Node {
	g := in[0].Graph()
	ctx.SetTraining(g, true)
	sp := t.staged
	si, rest := readStageInputs(key.shared, in)
	n := 1
	if key.shared {
		n = 2
	}
	switch {
	case key.stage < 0 && !key.backward:
		return sp.Embed(ctx, si)
	case key.stage < sp.Layers && !key.backward:
		return sp.Layer(ctx, key.stage, rest[:n], si)
	case key.stage == sp.Layers: // the head: the objective and its gradients
		state, rest := rest[:n], rest[n:]
		x := trainInputs{tokens: si.Tokens, attn: si.AttnMask}
		tk := trainKey{hasOld: key.hasOld, hasRef: key.hasRef, hasRollout: key.hasRollout, shared: key.shared, tokens: key.tokens}
		readObjectiveInputs(tk, rest, &x)
		logp := ConvertDType(sp.Head(ctx, state, si, x.pos), float32DType)
		loss, outs := t.objectiveOutputs(tk, logp, x)
		grads := t.accumulate(ctx, g, loss, state)
		return append(outs, grads...)
	case key.stage >= 0: // a layer's backward
		state, cot := rest[:n], rest[n:2*n]
		return t.accumulate(ctx, g, inner(sp.Layer(ctx, key.stage, state, si), cot), state)
	default: // the embedding's backward
		t.accumulate(ctx, g, inner(sp.Embed(ctx, si), rest[:n]), nil)
		return []*Node{ScalarZero(g, float32DType)}
	}
}

// inner is Σⱼ ⟨aⱼ, bⱼ⟩ in float32: its gradient with respect to a's inputs is the VJP of a with
// cotangents b.
func inner(a, b []*Node) *Node {
	s := ScalarZero(a[0].Graph(), float32DType)
	for j := range a {
		s = Add(s, ReduceAllSum(Mul(ConvertDType(a[j], float32DType), ConvertDType(b[j], float32DType))))
	}
	return s
}

// accumulate adds the gradient of f with respect to the trainable variables the graph uses to
// their accumulators and returns the gradients with respect to wrt (the cotangents a stage
// passes back).
func (t *Trainer) accumulate(ctx *context.Context, g *Graph, f *Node, wrt []*Node) []*Node {
	var vars []*context.Variable
	for v := range ctx.IterVariables() {
		if v.Trainable && v.InUseByGraph(g) && !strings.HasPrefix(v.Scope(), StateScope) {
			vars = append(vars, v)
		}
	}
	nodes := append([]*Node(nil), wrt...)
	for _, v := range vars {
		nodes = append(nodes, v.ValueGraph(g))
	}
	if len(nodes) == 0 { // a stage with no trained weight and nothing to pass back (a frozen embedding)
		return nil
	}
	grads := Gradient(f, nodes...)
	for i, v := range vars {
		acc := t.stateVariable(ctx, "grad_acc", v)
		acc.SetValueGraph(Add(acc.ValueGraph(g), ConvertDType(grads[len(wrt)+i], float32DType)))
	}
	return grads[:len(wrt)]
}

// checkpointedMicroBatch runs one micro-batch through the stages (this file's scheme) and
// returns the head's outputs (loss and diagnostics).
func (t *Trainer) checkpointedMicroBatch(mb *microBatch, key trainKey, denom float32) ([]*tensors.Tensor, error) {
	sp := t.staged
	base := stageKey{shared: key.shared}
	run := func(k stageKey, extra ...any) ([]*tensors.Tensor, error) {
		e, err := t.stageExec(k)
		if err != nil {
			return nil, err
		}
		return e.Exec(stageArgs(mb, extra...)...)
	}
	free := func(ts []*tensors.Tensor) {
		for _, x := range ts {
			x.FinalizeAll()
		}
	}
	asArgs := func(ts []*tensors.Tensor) []any {
		out := make([]any, len(ts))
		for i, x := range ts {
			out[i] = x
		}
		return out
	}

	// Forward: the states, one graph per stage.
	k := base
	k.stage = -1
	s0, err := run(k)
	if err != nil {
		return nil, fmt.Errorf("embedding: %w", err)
	}
	states := [][]*tensors.Tensor{s0}
	defer func() {
		for _, s := range states {
			free(s)
		}
	}()
	for i := range sp.Layers {
		k.stage = i
		s, err := run(k, asArgs(states[i])...)
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
		states = append(states, s)
	}

	// The head: the objective, ∂loss/∂s_L and the head's gradients.
	hk := base
	hk.stage, hk.hasOld, hk.hasRef, hk.hasRollout, hk.tokens = sp.Layers, key.hasOld, key.hasRef, key.hasRollout, key.tokens
	headOut, err := run(hk, append(asArgs(states[sp.Layers]), objectiveArgs(key, mb, denom)...)...)
	if err != nil {
		return nil, fmt.Errorf("head: %w", err)
	}
	n, nOut := len(states[0]), numTrainOutputs(key)
	outs, cot := headOut[:nOut], headOut[nOut:nOut+n]

	// Backward: each layer again from its saved input, then the embedding.
	bk := base
	bk.backward = true
	for i := sp.Layers - 1; i >= 0; i-- {
		bk.stage = i
		prev, err := run(bk, append(asArgs(states[i]), asArgs(cot)...)...)
		free(cot)
		if err != nil {
			free(outs)
			return nil, fmt.Errorf("layer %d backward: %w", i, err)
		}
		cot = prev
	}
	bk.stage = -1
	res, err := run(bk, asArgs(cot)...)
	free(cot)
	if err != nil {
		free(outs)
		return nil, fmt.Errorf("embedding backward: %w", err)
	}
	free(res)
	return outs, nil
}
