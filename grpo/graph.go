package grpo

// The training graph of one micro-batch: the policy's log-probs, the objective, the
// gradient added to the accumulators and, on a step's last micro-batch, AdamW.

import (
	"errors"
	"fmt"
	"slices"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph code reads as equations
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

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

// The inputs of a training graph, in the order of its Exec's arguments: the micro-batch's
// prefix and prefixMask when key shares one; tokens and attn; then the objective's inputs
// (objectiveArgs): pos, mask and adv; old, ref and rollout when key has them; denom.
// trainArgs and objectiveArgs write that order and readTrainInputs and readObjectiveInputs
// read it; nothing else depends on it.
type trainInputs struct {
	prefix, prefixMask *Node // int32 [1, P] (key.shared only)
	tokens, attn, pos  *Node // int32 [R, L], [R, L], [R, K]
	mask, adv          *Node // float32 [R, K], [R]
	old, ref, rollout  *Node // float32 [R, K]; nil when key has none
	denom              *Node // float32 scalar: sequences (seq-mean-token-mean) or tokens (token-mean) of the step
}

// trainArgs returns the arguments of a training graph for micro-batch mb under key.
func trainArgs(key trainKey, mb *microBatch, denom float32) []any {
	var args []any
	if key.shared {
		args = append(args, mb.prefix, mb.prefixMask)
	}
	args = append(args, mb.tokens, mb.attn)
	return append(args, objectiveArgs(key, mb, denom)...)
}

// objectiveArgs returns the objective's arguments of micro-batch mb under key: pos, mask, adv,
// old, ref and rollout when key has them, denom.
func objectiveArgs(key trainKey, mb *microBatch, denom float32) []any {
	args := []any{mb.pos, mb.mask, mb.adv}
	if key.hasOld {
		args = append(args, mb.old)
	}
	if key.hasRef {
		args = append(args, mb.ref)
	}
	if key.hasRollout {
		args = append(args, mb.rollout)
	}
	return append(args, tensors.FromScalar(denom))
}

// readTrainInputs names the graph inputs in, in trainArgs's order.
func readTrainInputs(key trainKey, in []*Node) trainInputs {
	var x trainInputs
	if key.shared {
		x.prefix, x.prefixMask, in = in[0], in[1], in[2:]
	}
	x.tokens, x.attn = in[0], in[1]
	readObjectiveInputs(key, in[2:], &x)
	return x
}

// readObjectiveInputs names the inputs in, in objectiveArgs's order, in x.
func readObjectiveInputs(key trainKey, in []*Node, x *trainInputs) {
	x.pos, x.mask, x.adv = in[0], in[1], in[2]
	in = in[3:]
	if key.hasOld {
		x.old, in = in[0], in[1:]
	}
	if key.hasRef {
		x.ref, in = in[0], in[1:]
	}
	if key.hasRollout {
		x.rollout, in = in[0], in[1:]
	}
	x.denom = in[0]
}

// The outputs of a training graph, in this order: the micro-batch's share of the loss
// (scalar); the per-row sums of ρ, KL, clipped-term flags and −log π over counted tokens
// ([R] each); with a rollout correction (key.hasRollout), the per-row sum, max and zeros of
// the weights c and the sum of the k3 terms of KL(π_rollout ‖ π_old) ([R] each); with
// key.tokens, log π_θ and ℓ_k ([R, K] each). trainOutputList writes that order and
// readTrainOutputs reads it.
type trainOutputs[T any] struct {
	loss, seqRatio, seqKL, seqClipped, seqNegLogP    T
	seqWeight, seqWeightMax, seqMasked, seqRolloutKL T // zero values without a correction
	logp, perToken                                   T // zero values without key.tokens
}

// numTrainOutputs is the number of outputs of a training graph (or of the head stage's
// objective outputs) under key.
func numTrainOutputs(key trainKey) int {
	n := 5
	if key.hasRollout {
		n += 4
	}
	if key.tokens {
		n += 2
	}
	return n
}

func trainOutputList(key trainKey, o trainOutputs[*Node]) []*Node {
	out := []*Node{o.loss, o.seqRatio, o.seqKL, o.seqClipped, o.seqNegLogP}
	if key.hasRollout {
		out = append(out, o.seqWeight, o.seqWeightMax, o.seqMasked, o.seqRolloutKL)
	}
	if key.tokens {
		out = append(out, o.logp, o.perToken)
	}
	return out
}

func readTrainOutputs(key trainKey, res []*tensors.Tensor) trainOutputs[*tensors.Tensor] {
	o := trainOutputs[*tensors.Tensor]{loss: res[0], seqRatio: res[1], seqKL: res[2], seqClipped: res[3], seqNegLogP: res[4]}
	res = res[5:]
	if key.hasRollout {
		o.seqWeight, o.seqWeightMax, o.seqMasked, o.seqRolloutKL, res = res[0], res[1], res[2], res[3], res[4:]
	}
	if key.tokens {
		o.logp, o.perToken = res[0], res[1]
	}
	return o
}

// objectiveOutputs builds the objective on the policy's log-probs logp [R, K] and the inputs x,
// and returns the loss and the graph's outputs (trainOutputList's order).
func (t *Trainer) objectiveOutputs(key trainKey, logp *Node, x trainInputs) (*Node, []*Node) {
	old := x.old
	if old == nil {
		old = StopGradient(logp) // μ = 1: ρ = 1, gradient kept
	}
	obj := buildObjective(t.cfg, objectiveInputs{logp: logp, old: old, ref: x.ref, rollout: x.rollout, mask: x.mask, adv: x.adv, denom: x.denom})
	o := trainOutputs[*Node]{
		loss: obj.Loss, seqRatio: obj.SeqRatio, seqKL: obj.SeqKL, seqClipped: obj.SeqClipped, seqNegLogP: obj.SeqNegLogP,
		seqWeight: obj.SeqWeight, seqWeightMax: obj.SeqWeightMax, seqMasked: obj.SeqMasked, seqRolloutKL: obj.SeqRolloutKL,
	}
	if key.tokens {
		o.logp, o.perToken = StopGradient(logp), StopGradient(Mul(obj.PerToken, x.mask))
	}
	return obj.Loss, trainOutputList(key, o)
}

// trainGraph builds one micro-batch's forward and backward pass and adds the gradients to
// the accumulators (the update is its own graphs, adamw.go).
func (t *Trainer) trainGraph(ctx *context.Context, key trainKey, in []*Node) []*Node {
	x := readTrainInputs(key, in)
	g := x.tokens.Graph()
	t.graphsBuilt++
	ctx.SetTraining(g, true)
	logp := ConvertDType(t.callPolicy(ctx, x.prefix, x.prefixMask, x.tokens, x.attn, x.pos), float32DType) // [R, K]
	loss, outs := t.objectiveOutputs(key, logp, x)

	params := t.trainedVariables(ctx, g)
	values := make([]*Node, len(params))
	for i, v := range params {
		values[i] = v.ValueGraph(g)
	}
	grads := Gradient(loss, values...)
	for i, v := range params {
		acc := t.stateVariable(ctx, "grad_acc", v)
		acc.SetValueGraph(Add(acc.ValueGraph(g), ConvertDType(grads[i], float32DType)))
	}
	return outs
}

// callPolicy calls the policy (the shared one when prefix is not nil), turning a panic with a
// non-error value into an error panic: GoMLX's executors return error panics as errors but
// re-raise anything else.
func (t *Trainer) callPolicy(ctx *context.Context, prefix, prefixMask, tokens, attn, pos *Node) (logp *Node) {
	defer func() {
		if r := recover(); r != nil {
			if err, ok := r.(error); ok {
				panic(err)
			}
			panic(fmt.Errorf("policy: %v", r))
		}
	}()
	if prefix != nil {
		logp = t.sharedPolicy(ctx, prefix, prefixMask, tokens, attn, pos)
	} else {
		logp = t.policy(ctx, tokens, attn, pos)
	}
	if want := pos.Shape().Dimensions; logp.Rank() != 2 || logp.Shape().Dim(0) != want[0] || logp.Shape().Dim(1) != want[1] {
		panic(fmt.Errorf("policy returned log-probs shaped %s, want [%d %d]", logp.Shape(), want[0], want[1]))
	}
	return logp
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
