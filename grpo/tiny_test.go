package grpo

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// The tiny test model: a causal bag of embeddings and an MLP.
//
//	h_p    = mean_{q ≤ p, attn_q = 1} E[tok_q] + P[p]     [B, L, D]
//	logits = tanh(h W1 + b1) W2 + b2                      [B, L, V]
//	log π(tok_p | tok_<p) = log softmax(logits_{p−1} / T)[tok_p]
//
// 2,168 parameters. It uses only ops whose gradients the pure-Go backend has (one-hot
// products instead of gathers and slices).
const (
	tinyVocab  = 8
	tinyDim    = 24
	tinyHidden = 48
	tinyMaxLen = 16
	tinyTemp   = 1.0
)

// tinyInit creates the tiny model's variables in ctx from a seeded Go generator, so that
// weights do not depend on GoMLX's random state.
func tinyInit(ctx *context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	normal := func(scale float64, dims ...int) *tensors.Tensor {
		n := 1
		for _, d := range dims {
			n *= d
		}
		data := make([]float32, n)
		for i := range data {
			data[i] = float32(scale * rng.NormFloat64())
		}
		return tensors.FromFlatDataAndDimensions(data, dims...)
	}
	c := ctx.In("tiny")
	c.VariableWithValue("E", normal(0.5, tinyVocab, tinyDim))
	c.VariableWithValue("P", normal(0.1, tinyMaxLen, tinyDim))
	c.VariableWithValue("W1", normal(1/math.Sqrt(tinyDim), tinyDim, tinyHidden))
	c.VariableWithValue("b1", normal(0, tinyHidden))
	c.VariableWithValue("W2", normal(0.1/math.Sqrt(tinyHidden), tinyHidden, tinyVocab))
	c.VariableWithValue("b2", normal(0, tinyVocab))
}

// tinyLogits returns the logits of every position, [B, L, V].
func tinyLogits(ctx *context.Context, tokens, attn *Node) *Node {
	g := tokens.Graph()
	c := ctx.In("tiny").Reuse()
	v := func(name string) *Node { return c.GetVariable(name).ValueGraph(g) }
	L := tokens.Shape().Dim(1)
	mask := ConvertDType(attn, dtypes.Float32)                                          // [B, L]
	x := Einsum("blv,vd->bld", OneHot(tokens, tinyVocab, dtypes.Float32), v("E"))       // [B, L, D]
	causal := ConvertDType(LowerTriangular(g, L), dtypes.Float32)                       // [L, L]: q ≤ p
	weights := Mul(InsertAxes(causal, 0), InsertAxes(mask, 1))                          // [B, L(p), L(q)]
	weights = Div(weights, MaxScalar(ReduceAndKeep(weights, ReduceSum, -1), 1))         // causal mean
	h := Einsum("bpq,bqd->bpd", weights, x)                                             // [B, L, D]
	pos := OneHot(Iota(g, shapes.Make(dtypes.Int32, L), 0), tinyMaxLen, dtypes.Float32) // [L, maxLen]
	h = Add(h, InsertAxes(Einsum("lm,md->ld", pos, v("P")), 0))                         // [B, L, D]
	z := Tanh(Add(Einsum("bld,dh->blh", h, v("W1")), ExpandLeftToRank(v("b1"), 3)))     // [B, L, H]
	return Add(Einsum("blh,hv->blv", z, v("W2")), ExpandLeftToRank(v("b2"), 3))         // [B, L, V]
}

// tinyPolicy implements PolicyFn for the tiny model.
func tinyPolicy(ctx *context.Context, tokens, attn, targetPos *Node) *Node {
	L := tokens.Shape().Dim(1)
	logits := tinyLogits(ctx, tokens, attn)                    // [B, L, V]
	prev := OneHot(SubScalar(targetPos, 1), L, dtypes.Float32) // [B, K, L]: row p−1
	logitsK := Einsum("bkl,blv->bkv", prev, logits)            // [B, K, V]
	at := OneHot(targetPos, L, dtypes.Int32)                   // [B, K, L]
	ids := ReduceSum(Mul(at, InsertAxes(tokens, 1)), -1)       // [B, K] token ids at p
	return TokenLogProbs(logitsK, ids, tinyTemp)               // [B, K]
}

// sampler draws completions from the tiny model in Go, from its logits.
type sampler struct {
	exec *context.Exec
	rng  *rand.Rand
}

func newSampler(t *testing.T, ctx *context.Context, seed uint64) *sampler {
	t.Helper()
	exec, err := context.NewExec(backend(t), ctx.Reuse(), tinyLogits)
	if err != nil {
		t.Fatal(err)
	}
	return &sampler{exec: exec, rng: rand.New(rand.NewPCG(seed, 2))}
}

// sample returns one completion of n tokens for each prompt, at temperature tinyTemp.
func (s *sampler) sample(t *testing.T, prompts [][]int32, n int) [][]int32 {
	t.Helper()
	const L = 8
	B := len(prompts)
	tokens, attn := make([]int32, B*L), make([]int32, B*L)
	lens := make([]int, B)
	for b, p := range prompts {
		copy(tokens[b*L:], p)
		for i := range p {
			attn[b*L+i] = 1
		}
		lens[b] = len(p)
	}
	out := make([][]int32, B)
	for range n {
		res, err := s.exec.Exec(tensors.FromFlatDataAndDimensions(tokens, B, L), tensors.FromFlatDataAndDimensions(attn, B, L))
		if err != nil {
			t.Fatal(err)
		}
		logits := tensors.MustCopyFlatData[float32](res[0])
		for b := range B {
			row := logits[(b*L+lens[b]-1)*tinyVocab : (b*L+lens[b])*tinyVocab]
			tok := s.draw(row)
			tokens[b*L+lens[b]], attn[b*L+lens[b]] = tok, 1
			lens[b]++
			out[b] = append(out[b], tok)
		}
	}
	return out
}

func (s *sampler) draw(logits []float32) int32 {
	maxL := math.Inf(-1)
	for _, l := range logits {
		maxL = math.Max(maxL, float64(l)/tinyTemp)
	}
	probs := make([]float64, len(logits))
	sum := 0.0
	for i, l := range logits {
		probs[i] = math.Exp(float64(l)/tinyTemp - maxL)
		sum += probs[i]
	}
	u := s.rng.Float64() * sum
	for i, p := range probs {
		if u < p {
			return int32(i)
		}
		u -= p
	}
	return int32(len(probs) - 1)
}
