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
// prefix and prefixMask when key shares one; tokens, attn, pos, mask and adv; old and ref
// when key has them; denom. trainArgs writes that order and readTrainInputs reads it;
// nothing else depends on it.
type trainInputs struct {
	prefix, prefixMask *Node // int32 [1, P] (key.shared only)
	tokens, attn, pos  *Node // int32 [R, L], [R, L], [R, K]
	mask, adv          *Node // float32 [R, K], [R]
	old, ref           *Node // float32 [R, K]; nil when key has none
	denom              *Node // float32 scalar: sequences (seq-mean-token-mean) or tokens (token-mean) of the step
}

// trainArgs returns the arguments of a training graph for micro-batch mb under key.
func trainArgs(key trainKey, mb *microBatch, denom float32) []any {
	var args []any
	if key.shared {
		args = append(args, mb.prefix, mb.prefixMask)
	}
	args = append(args, mb.tokens, mb.attn, mb.pos, mb.mask, mb.adv)
	if key.hasOld {
		args = append(args, mb.old)
	}
	if key.hasRef {
		args = append(args, mb.ref)
	}
	return append(args, tensors.FromScalar(denom))
}

// readTrainInputs names the graph inputs in, in trainArgs's order.
func readTrainInputs(key trainKey, in []*Node) trainInputs {
	var x trainInputs
	if key.shared {
		x.prefix, x.prefixMask, in = in[0], in[1], in[2:]
	}
	x.tokens, x.attn, x.pos, x.mask, x.adv = in[0], in[1], in[2], in[3], in[4]
	in = in[5:]
	if key.hasOld {
		x.old, in = in[0], in[1:]
	}
	if key.hasRef {
		x.ref, in = in[0], in[1:]
	}
	x.denom = in[0]
	return x
}

// The outputs of a training graph, in this order: the micro-batch's share of the loss
// (scalar); the per-row sums of ρ, KL, clipped-term flags and −log π over counted tokens
// ([R] each). trainOutputList writes that order and readTrainOutputs reads it.
type trainOutputs[T any] struct {
	loss, seqRatio, seqKL, seqClipped, seqNegLogP T
}

func trainOutputList(o trainOutputs[*Node]) []*Node {
	return []*Node{o.loss, o.seqRatio, o.seqKL, o.seqClipped, o.seqNegLogP}
}

func readTrainOutputs(res []*tensors.Tensor) trainOutputs[*tensors.Tensor] {
	return trainOutputs[*tensors.Tensor]{loss: res[0], seqRatio: res[1], seqKL: res[2], seqClipped: res[3], seqNegLogP: res[4]}
}

// trainGraph builds one micro-batch's forward and backward pass and adds the gradients to
// the accumulators (the update is its own graphs, adamw.go).
func (t *Trainer) trainGraph(ctx *context.Context, key trainKey, in []*Node) []*Node {
	x := readTrainInputs(key, in)
	g := x.tokens.Graph()
	t.graphsBuilt++
	ctx.SetTraining(g, true)
	logp := ConvertDType(t.callPolicy(ctx, x.prefix, x.prefixMask, x.tokens, x.attn, x.pos), float32DType) // [R, K]
	old := x.old
	if old == nil {
		old = StopGradient(logp) // μ = 1: ρ = 1, gradient kept
	}
	obj := buildObjective(t.cfg, logp, old, x.ref, x.mask, x.adv, x.denom)

	params := t.trainedVariables(ctx, g)
	values := make([]*Node, len(params))
	for i, v := range params {
		values[i] = v.ValueGraph(g)
	}
	grads := Gradient(obj.Loss, values...)
	for i, v := range params {
		acc := t.stateVariable(ctx, "grad_acc", v)
		acc.SetValueGraph(Add(acc.ValueGraph(g), ConvertDType(grads[i], float32DType)))
	}
	return trainOutputList(trainOutputs[*Node]{loss: obj.Loss, seqRatio: obj.SeqRatio, seqKL: obj.SeqKL, seqClipped: obj.SeqClipped, seqNegLogP: obj.SeqNegLogP})
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
