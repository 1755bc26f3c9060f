package simplegofast

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// benchmarkDot times one DotGeneral contracting the last axis of both
// operands ([M, K]·[N, K]ᵀ, the Hugging Face linear layout) on the fast or
// the plain backend, and reports GFLOP/s.
func benchmarkDot(b *testing.B, M, N, K int, fast bool) {
	f, p := testBackends(b)
	backend := map[bool]backends.Backend{true: f, false: p}[fast]
	rng := rand.New(rand.NewPCG(1, 1))
	x := tensors.FromFlatDataAndDimensions(randomFloats(rng, M*K), M, K)
	y := tensors.FromFlatDataAndDimensions(randomFloats(rng, N*K), N, K)
	e := MustNewExec(backend, func(x, y *Node) *Node { return DotGeneral(x, []int{1}, nil, y, []int{1}, nil) })
	e.MustExec(x, y)[0].FinalizeAll() // compile
	b.ResetTimer()
	for range b.N {
		e.MustExec(x, y)[0].FinalizeAll()
	}
	b.ReportMetric(2*float64(M*N*K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkDot1024Fast(b *testing.B)        { benchmarkDot(b, 1024, 1024, 1024, true) }
func BenchmarkDot1024Plain(b *testing.B)       { benchmarkDot(b, 1024, 1024, 1024, false) }
func BenchmarkDotDecodeFast(b *testing.B)      { benchmarkDot(b, 8, 3072, 1024, true) }
func BenchmarkDotDecodePlain(b *testing.B)     { benchmarkDot(b, 8, 3072, 1024, false) }
func BenchmarkDotVocabularyFast(b *testing.B)  { benchmarkDot(b, 8, 151936, 64, true) }
func BenchmarkDotVocabularyPlain(b *testing.B) { benchmarkDot(b, 8, 151936, 64, false) }

// BenchmarkExpFloat32 times the exponential over a vocabulary-sized row.
func BenchmarkExpFloat32(b *testing.B) {
	rng := rand.New(rand.NewPCG(2, 2))
	x := randomFloats(rng, 151936)
	dst := make([]float32, len(x))
	b.SetBytes(int64(4 * len(x)))
	for range b.N {
		ExpFloat32(dst, x)
	}
}
