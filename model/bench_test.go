package model

import (
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// benchConfig is the bench-size model of the issue and of
// scripts/bench_torch.py: hidden 256, 4 layers, vocab 8192, 4 query / 2 kv
// heads of 64, MLP 768, tied embeddings (5.25M parameters).
func benchConfig() *Config {
	return &Config{
		VocabSize: 8192, HiddenSize: 256, IntermediateSize: 768, NumHiddenLayers: 4,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 64, RMSNormEps: 1e-6, RopeTheta: 1e6,
		TieWordEmbeddings: true, MaxPositionEmbeddings: 4096, InitializerRange: 0.02, BOSTokenID: 1, EOSTokenIDs: []int{2},
	}
}

// Bench shapes, shared with scripts/bench_torch.py.
const (
	benchBatch     = 4   // training / forward batch
	benchSeq       = 256 // training / forward sequence length
	benchPrompt    = 16  // decode benchmarks: prompt length
	benchNewTokens = 64  // decode benchmarks: generated tokens per row
)

// benchBatchInputs returns tokens [B, L], an all-ones mask, and target
// positions 1..L-1 for every row.
func benchBatchInputs() (tokens, mask, target [][]int32) {
	rng := rand.New(rand.NewPCG(1, 2))
	for b := 0; b < benchBatch; b++ {
		var tok, msk, tgt []int32
		for p := 0; p < benchSeq; p++ {
			tok = append(tok, int32(rng.IntN(8192)))
			msk = append(msk, 1)
			if p > 0 {
				tgt = append(tgt, int32(p))
			}
		}
		tokens, mask, target = append(tokens, tok), append(mask, msk), append(target, tgt)
	}
	return tokens, mask, target
}

// BenchmarkForward: log-probs of every token of a 4 × 256 batch (the
// training forward without the backward pass).
func BenchmarkForward(b *testing.B) {
	m := newTestModel(b, benchConfig(), 1)
	tokens, mask, target := benchBatchInputs()
	e := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, tok, msk, tgt *Node) *Node {
		return m.TokenLogProbs(ctx, tok, msk, tgt, 1)
	})
	if _, err := e.Exec(tokens, mask, target); err != nil { // compile outside the timing
		b.Fatal(err)
	}
	cpu := startCPU(b)
	for i := 0; i < b.N; i++ {
		res, err := e.Exec(tokens, mask, target)
		if err != nil {
			b.Fatal(err)
		}
		res[0].FinalizeAll()
	}
	cpu.stop()
	b.ReportMetric(float64(benchBatch*benchSeq*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkTrainStep: forward + backward + AdamW (GoMLX's optimizer) on the
// mean negative log-likelihood of a 4 × 256 batch.
func BenchmarkTrainStep(b *testing.B) {
	m := newTestModel(b, benchConfig(), 1)
	tokens, mask, target := benchBatchInputs()
	opt := optimizers.Adam().LearningRate(1e-4).WeightDecay(0.01).Done()
	e := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, tok, msk, tgt *Node) *Node {
		loss := Neg(ReduceAllMean(m.TokenLogProbs(ctx, tok, msk, tgt, 1)))
		opt.UpdateGraph(ctx, tok.Graph(), loss)
		return loss
	})
	if _, err := e.Exec(tokens, mask, target); err != nil { // compile (and first step) outside the timing
		b.Fatal(err)
	}
	cpu := startCPU(b)
	for i := 0; i < b.N; i++ {
		if _, err := e.Exec(tokens, mask, target); err != nil {
			b.Fatal(err)
		}
	}
	cpu.stop()
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/step")
	b.ReportMetric(float64(benchBatch*benchSeq*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func benchmarkDecode(b *testing.B, batch int) {
	m := newTestModel(b, benchConfig(), 1)
	rng := rand.New(rand.NewPCG(3, 4))
	prompts := randomSeqs(rng, 8192, make([]int, batch)...)
	for i := range prompts {
		prompts[i] = randomSeqs(rng, 8192, benchPrompt)[0]
	}
	opts := GenerateOptions{MaxNewTokens: benchNewTokens} // greedy, no stop: every row makes benchNewTokens
	if _, err := m.Generate(prompts, opts); err != nil {  // compile outside the timing
		b.Fatal(err)
	}
	cpu := startCPU(b)
	for i := 0; i < b.N; i++ {
		if _, err := m.Generate(prompts, opts); err != nil {
			b.Fatal(err)
		}
	}
	cpu.stop()
	b.ReportMetric(float64(batch*benchNewTokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkDecode1 / BenchmarkDecode8: greedy generation of 64 tokens after a
// 16-token prompt (prefill included) at batch 1 and 8.
func BenchmarkDecode1(b *testing.B) { benchmarkDecode(b, 1) }
func BenchmarkDecode8(b *testing.B) { benchmarkDecode(b, 8) }

var _ = dtypes.Float32

// cpuTime is the CPU time (user + system, all threads) the process has used.
// On a machine shared with other work it is a steadier measure than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuTimer reports CPU seconds per op (metric "cpu-s/op") next to the wall time.
type cpuTimer struct {
	b     *testing.B
	start time.Duration
}

func startCPU(b *testing.B) *cpuTimer { b.ResetTimer(); return &cpuTimer{b, cpuTime()} }

func (c *cpuTimer) stop() float64 {
	s := (cpuTime() - c.start).Seconds() / float64(c.b.N)
	c.b.ReportMetric(s, "cpu-s/op")
	return s
}

// BenchmarkLoad loads the checkpoint named by $MODEL_BENCH_CKPT (skipped
// when unset) as $MODEL_BENCH_DTYPE (float32 by default, or bfloat16) and
// reports the process's peak RSS next to the weights' size in memory. Run it
// alone, as peak RSS is per process:
//
//	MODEL_BENCH_CKPT=/path/to/ckpt go test ./model -run '^$' -bench '^BenchmarkLoad$' -benchtime 1x
func BenchmarkLoad(b *testing.B) {
	dir := os.Getenv("MODEL_BENCH_CKPT")
	if dir == "" {
		b.Skip("set MODEL_BENCH_CKPT to a checkpoint directory")
	}
	dtype, err := ParseDType(os.Getenv("MODEL_BENCH_DTYPE")) // "" = float32
	if err != nil {
		b.Fatal(err)
	}
	backend := testBackend(b)
	before := peakRSS()
	for i := 0; i < b.N; i++ {
		m, err := LoadAs(backend, dir, dtype)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(m.NumParameters()*int64(dtype.Size()))/(1<<20), "weights-MB")
	}
	b.ReportMetric(float64(before)/(1<<20), "rss-before-MB")
	b.ReportMetric(float64(peakRSS())/(1<<20), "peak-rss-MB")
}

// peakRSS is the process's peak resident set size in bytes (Linux: ru_maxrss is in KB).
func peakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Maxrss * 1024
}
