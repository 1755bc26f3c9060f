package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TestBlockedAttention compares, in training graphs, the blocked attention (blocks of 4
// queries over 9 and 13 positions: the last block shorter) with the plain one: log-probs and
// the gradient of a weighted sum of them with respect to every weight, within 1e-5 of their
// scale, for whole rows (TokenLogProbs) and rows after a shared prefix (TokenLogProbsShared,
// where the keys include the prefix's), at temperatures 1 and 0.8.
func TestBlockedAttention(t *testing.T) {
	for _, shared := range []bool{false, true} {
		for _, temp := range []float64{1, 0.8} {
			t.Run(fmt.Sprintf("shared=%v,T=%g", shared, temp), func(t *testing.T) {
				m := newTestModel(t, testConfig(), 21)
				rng := rand.New(rand.NewPCG(5, 6))
				const L, K, P = 13, 4, 9
				seqs := randomSeqs(rng, m.cfg.VocabSize, 13, 7, 10)
				prefix, prefixMask := [][]int32{make([]int32, P)}, [][]int32{make([]int32, P)}
				for j, id := range randomSeqs(rng, m.cfg.VocabSize, 7)[0] {
					prefix[0][j], prefixMask[0][j] = int32(id), 1
				}
				B := len(seqs)
				tokens, mask, target, weights := make([][]int32, B), make([][]int32, B), make([][]int32, B), make([][]float32, B)
				for b, s := range seqs {
					tokens[b], mask[b] = make([]int32, L), make([]int32, L)
					for j, id := range s {
						tokens[b][j], mask[b][j] = int32(id), 1
					}
					for k := range K {
						target[b] = append(target[b], int32(min(2+2*k, len(s)-1)))
						weights[b] = append(weights[b], float32(rng.NormFloat64()))
					}
				}
				run := func(block int) []*tensors.Tensor {
					m.SetAttentionBlock(block)
					e := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, in []*Node) []*Node {
						g := in[0].Graph()
						ctx.SetTraining(g, true)
						var logp *Node
						if shared {
							logp = m.TokenLogProbsShared(ctx, in[0], in[1], in[2], in[3], in[4], temp)
						} else {
							logp = m.TokenLogProbs(ctx, in[2], in[3], in[4], temp)
						}
						var values []*Node
						for v := range ctx.IterVariables() {
							values = append(values, v.ValueGraph(g))
						}
						return append([]*Node{logp}, Gradient(ReduceAllSum(Mul(logp, in[5])), values...)...)
					})
					out, err := e.Exec(prefix, prefixMask, tokens, mask, target, weights)
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				want, got := run(0), run(4)
				for i := range want {
					a, b := tensors.MustCopyFlatData[float32](got[i]), tensors.MustCopyFlatData[float32](want[i])
					scale, worst := 1e-3, 0.0
					for j := range b {
						scale = math.Max(scale, math.Abs(float64(b[j])))
						worst = math.Max(worst, math.Abs(float64(a[j]-b[j])))
					}
					if worst > 1e-5*scale {
						t.Errorf("output %d: max |blocked - plain| = %g (scale %g)", i, worst, scale)
					}
				}
			})
		}
	}
}

// TestBlockedForward: a forward that is not a training graph, with more queries than a block
// (150 positions, blocks of 64: a prefill), runs the blocks forward only and gives the plain
// attention's logits within 1e-5 of their scale; generation from those prompts keeps its
// log-probs (prefill and decoding) within 1e-5 of the full forward.
func TestBlockedForward(t *testing.T) {
	m := newTestModel(t, testConfig(), 31)
	m.forwardBlockBytes = 1 // blocks at every size
	rng := rand.New(rand.NewPCG(9, 9))
	seqs := randomSeqs(rng, m.cfg.VocabSize, 150, 97)
	logits := func(block int) []float32 {
		m.SetAttentionBlock(block)
		m.logits = nil // a new executable, built with this block
		tokens, mask := make([][]int32, 2), make([][]int32, 2)
		for b, s := range seqs {
			tokens[b], mask[b] = make([]int32, 150), make([]int32, 150)
			for j, id := range s {
				tokens[b][j], mask[b][j] = int32(id), 1
			}
		}
		e, err := m.logitsExec()
		if err != nil {
			t.Fatal(err)
		}
		out, err := execRecover(e, tokens, mask)
		if err != nil {
			t.Fatal(err)
		}
		return tensors.MustCopyFlatData[float32](out[0])
	}
	want, got := logits(0), logits(64)
	scale, worst := 1.0, 0.0
	for i := range want {
		scale = math.Max(scale, math.Abs(float64(want[i])))
		worst = math.Max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if worst > 1e-5*scale {
		t.Errorf("blocked forward: max |Δ logits| = %g (scale %g)", worst, scale)
	}
	m.logits = nil
	m.SetAttentionBlock(0) // the full forward below: plain
	fullA := fullLogProbs(t, m, seqs[0], 1)
	m.SetAttentionBlock(64)
	m.prefill, m.extend = nil, nil
	gens, err := m.Generate([][]int{seqs[0]}, GenerateOptions{MaxNewTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d := math.Abs(float64(gens[0].LogProbs[0]) - fullA[len(seqs[0])-1][gens[0].Tokens[0]]); d > 1e-5 {
		t.Errorf("generation after a blocked prefill: log-prob off by %g", d)
	}
}
