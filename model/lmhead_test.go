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

func TestChunks(t *testing.T) {
	m := &Model{cfg: Config{VocabSize: 1000}}
	for _, c := range []struct {
		chunk int
		want  string
	}{
		{0, "[[0 1000]]"},
		{1000, "[[0 1000]]"},
		{5000, "[[0 1000]]"},
		{400, "[[0 400] [400 800] [800 1000]]"},
		{250, "[[0 250] [250 500] [500 750] [750 1000]]"},
	} {
		m.SetLMHeadChunk(c.chunk)
		if got := fmt.Sprint(m.chunks()); got != c.want {
			t.Errorf("chunk %d: %s, want %s", c.chunk, got, c.want)
		}
	}
}

// TestChunkedLMHead compares the chunked LM head with the whole-vocabulary
// one on the same model: log-probs, entropies and the gradient of a
// weighted sum of the log-probs with respect to every weight, within 1e-5
// of their scale, tied and untied, at temperatures 1 and 0.7, with a
// vocabulary (1000) that is not a multiple of the chunk (96).
func TestChunkedLMHead(t *testing.T) {
	for _, tied := range []bool{true, false} {
		for _, temp := range []float64{1, 0.7} {
			t.Run(fmt.Sprintf("tied=%v,T=%g", tied, temp), func(t *testing.T) {
				cfg := testConfig()
				cfg.VocabSize, cfg.TieWordEmbeddings = 1000, tied
				m := newTestModel(t, cfg, 11)
				rng := rand.New(rand.NewPCG(3, 4))
				seqs := randomSeqs(rng, cfg.VocabSize, 9, 6, 8)
				const L, K = 9, 5
				tokens, mask, target, weights := make([][]int32, 3), make([][]int32, 3), make([][]int32, 3), make([][]float32, 3)
				for b, s := range seqs {
					tokens[b], mask[b] = make([]int32, L), make([]int32, L)
					for j, id := range s {
						tokens[b][j], mask[b][j] = int32(id), 1
					}
					for k := range K {
						target[b] = append(target[b], int32(min(1+k, len(s)-1)))
						weights[b] = append(weights[b], float32(rng.NormFloat64()))
					}
				}
				var names []string
				for v := range m.Context().IterVariables() {
					names = append(names, v.ScopeAndName())
				}
				run := func(chunk int) []*tensors.Tensor {
					m.SetLMHeadChunk(chunk)
					e := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, tok, msk, pos, w *Node) []*Node {
						logp, ent := m.TokenLogProbsAndEntropy(ctx, tok, msk, pos, temp)
						var values []*Node
						for v := range ctx.IterVariables() {
							values = append(values, v.ValueGraph(tok.Graph()))
						}
						return append([]*Node{logp, ent}, Gradient(ReduceAllSum(Mul(logp, w)), values...)...)
					})
					out, err := e.Exec(tokens, mask, target, weights)
					if err != nil {
						t.Fatal(err)
					}
					return out
				}
				want, got := run(0), run(96)
				for i := range want {
					a, b := tensors.MustCopyFlatData[float32](got[i]), tensors.MustCopyFlatData[float32](want[i])
					scale, worst := 1e-3, 0.0
					for j := range b {
						scale = math.Max(scale, math.Abs(float64(b[j])))
						worst = math.Max(worst, math.Abs(float64(a[j]-b[j])))
					}
					what := []string{"log-probs", "entropies"}[min(i, 1)]
					if i > 1 {
						what = "gradient of " + names[i-2]
					}
					if worst > 1e-5*scale {
						t.Errorf("%s: max |chunked - whole| = %g (scale %g)", what, worst, scale)
					}
				}
			})
		}
	}
}
