package model

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// BenchmarkLMHead times the LM head's log-probs and their gradient (with respect to the
// hidden states and the tied embedding) for 384 target positions of the demo's model
// (hidden 64, vocabulary 151,936), over the whole vocabulary and over chunks of several sizes,
// in wall and CPU seconds.
func BenchmarkLMHead(b *testing.B) {
	for _, chunk := range []int{0, 1024, 2048, 4096, 8192} {
		b.Run(fmt.Sprintf("chunk=%d", chunk), func(b *testing.B) {
			cfg := DefaultTinyConfig()
			m, err := New(testBackend(b), &cfg, 1, dtypes.Float32)
			if err != nil {
				b.Fatal(err)
			}
			m.SetLMHeadChunk(chunk)
			const N = 384
			rng := rand.New(rand.NewPCG(1, 1))
			h, targets := make([][][]float32, 1), make([][]int32, 1)
			h[0] = make([][]float32, N)
			for i := range h[0] {
				h[0][i] = make([]float32, cfg.HiddenSize)
				for j := range h[0][i] {
					h[0][i][j] = float32(rng.NormFloat64())
				}
				targets[0] = append(targets[0], int32(rng.IntN(cfg.VocabSize)))
			}
			e := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, hh, tt *Node) []*Node {
				pos := AddScalar(Iota(hh.Graph(), tt.Shape(), 1), 1) // positions 1..N: the LM head reads 0..N-1
				tokens := Concatenate([]*Node{ZerosLike(Slice(tt, AxisRange(), AxisRange(0, 1))), tt}, 1)
				logp, _ := m.logProbsAt(ctx, hh, tokens, pos, 1, false)
				w := m.lmWeight(ctx, hh.Graph())
				return append([]*Node{ReduceAllSum(logp)}, Gradient(ReduceAllSum(logp), hh, w)...)
			})
			for _, o := range e.MustExec(h, targets) {
				o.FinalizeAll()
			}
			cpu0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				for _, o := range e.MustExec(h, targets) {
					o.FinalizeAll()
				}
			}
			b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}
