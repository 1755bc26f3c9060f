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
