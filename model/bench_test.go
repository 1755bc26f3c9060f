package model

import (
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/mageguard/mageguard/internal/heapstat"
	"github.com/mageguard/mageguard/model/backend"
)

// benchConfig is the bench-size model of docs/performance.md and of
// scripts/bench_torch.py: hidden 256, 4 layers, vocab 8192, 4 query / 2 kv
// heads of 64, MLP 768, tied embeddings (5.25M parameters).
func benchConfig() *Config {
	return &Config{
		VocabSize: 8192, HiddenSize: 256, IntermediateSize: 768, NumHiddenLayers: 4,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 64, RMSNormEps: 1e-6, RopeTheta: 1e6,
		TieWordEmbeddings: true, MaxPositionEmbeddings: 4096, InitializerRange: 0.02, BOSTokenID: 1, EOSTokenIDs: []int{2},
	}
}

var (
	plainBenchOnce    sync.Once
	plainBenchBackend backends.Backend
	plainBenchErr     error
)

// newBenchModel is the bench model on the test backend or, with
// MODEL_BENCH_SIMPLEGO_OPS=1, on a backend that keeps simplego's own matrix
// product and elementwise ops (backend.Config.SimpleGoOps): the figures
// before this package's executors, from the same binary; with
// MODEL_BENCH_OPS_SEQUENTIAL=1, on one that runs a graph's ops one at a time
// in program order (backend.Config.OpsSequential).
func newBenchModel(b *testing.B) *Model {
	simplegoOps, sequential := os.Getenv("MODEL_BENCH_SIMPLEGO_OPS") == "1", os.Getenv("MODEL_BENCH_OPS_SEQUENTIAL") == "1"
	if !simplegoOps && !sequential {
		return newTestModel(b, benchConfig(), 1)
	}
	plainBenchOnce.Do(func() { // once: simplego's message must not split a benchmark's output line
		cfg := backend.Default()
		cfg.SimpleGoOps, cfg.OpsSequential = simplegoOps, sequential
		cfg.ProcessSettings().Apply() // as testBackend does
		plainBenchBackend, plainBenchErr = backend.New(cfg)
	})
	if plainBenchErr != nil {
		b.Fatal(plainBenchErr)
	}
	m, err := New(plainBenchBackend, benchConfig(), 1, dtypes.Float32)
	if err != nil {
		b.Fatal(err)
	}
	return m
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
	m := newBenchModel(b)
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
		cpu.lap()
	}
	cpu.stop()
	b.ReportMetric(float64(benchBatch*benchSeq*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkTrainStep: forward + backward + AdamW (GoMLX's optimizer) on the
// mean negative log-likelihood of a 4 × 256 batch.
func BenchmarkTrainStep(b *testing.B) { benchmarkTrainStep(b, DefaultAttentionBlock) }

// BenchmarkTrainStepPlainAttention: the same step with the plain attention (model.attention_block
// 0), which holds each layer's [B, heads, T, S] probabilities for the backward instead of
// recomputing them block by block.
func BenchmarkTrainStepPlainAttention(b *testing.B) { benchmarkTrainStep(b, 0) }

func benchmarkTrainStep(b *testing.B, block int) {
	m := newBenchModel(b)
	m.SetAttentionBlock(block)
	tokens, mask, target := benchBatchInputs()
	opt := optimizers.Adam().LearningRate(1e-4).WeightDecay(0.01).Done()
	e := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, tok, msk, tgt *Node) *Node {
		ctx.SetTraining(tok.Graph(), true) // a graph that takes gradients is a training graph (attention.go)
		loss := Neg(ReduceAllMean(m.TokenLogProbs(ctx, tok, msk, tgt, 1)))
		opt.UpdateGraph(ctx, tok.Graph(), loss)
		return loss
	})
	step := func() {
		if _, err := e.Exec(tokens, mask, target); err != nil {
			b.Fatal(err)
		}
	}
	step() // compile (and first step) outside the timing
	cpu := startCPU(b)
	for i := 0; i < b.N; i++ {
		step()
		cpu.lap()
	}
	cpu.stop()
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/step")
	b.ReportMetric(float64(benchBatch*benchSeq*b.N)/b.Elapsed().Seconds(), "tokens/s")
	reportPeakHeap(b, step)
}

// reportPeakHeap runs fn once more, untimed, with the garbage collector made eager, and
// reports the peak of the Go heap meanwhile (metric "peak-heap-MB": the weights, the optimizer
// state and what one step holds; on the pure-Go backend every tensor is a Go slice).
func reportPeakHeap(b *testing.B, fn func()) {
	b.StopTimer()
	b.ReportMetric(float64(heapstat.Peak(fn))/1e6, "peak-heap-MB")
}

// benchSharedPrefix is how many of the benchSeq tokens of every row the
// shared-prefix benchmarks share (a role's system prompt: ~450 of ~500).
const benchSharedPrefix = 192

// benchmarkTrainStepPrefix: a training step on 4 × 256 tokens whose first
// 192 are the same in every row, with log-probs of the last 63 (the
// completion), by TokenLogProbs on the whole rows or by TokenLogProbsShared.
func benchmarkTrainStepPrefix(b *testing.B, shared bool) {
	m := newBenchModel(b)
	tokens, mask, _ := benchBatchInputs()
	for r := range tokens {
		copy(tokens[r][:benchSharedPrefix], tokens[0][:benchSharedPrefix])
	}
	own := benchSeq - benchSharedPrefix
	var prefix, prefixMask, rest, restMask, target, wholeTarget [][]int32
	prefix, prefixMask = [][]int32{tokens[0][:benchSharedPrefix]}, [][]int32{mask[0][:benchSharedPrefix]}
	for r := range tokens {
		rest, restMask = append(rest, tokens[r][benchSharedPrefix:]), append(restMask, mask[r][benchSharedPrefix:])
		var t, w []int32
		for p := 1; p < own; p++ {
			t, w = append(t, int32(p)), append(w, int32(benchSharedPrefix+p))
		}
		target, wholeTarget = append(target, t), append(wholeTarget, w)
	}
	opt := optimizers.Adam().LearningRate(1e-4).WeightDecay(0.01).Done()
	e := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, in []*Node) *Node {
		ctx.SetTraining(in[0].Graph(), true)
		var logp *Node
		if shared {
			logp = m.TokenLogProbsShared(ctx, in[0], in[1], in[2], in[3], in[4], 1)
		} else {
			logp = m.TokenLogProbs(ctx, in[0], in[1], in[2], 1)
		}
		loss := Neg(ReduceAllMean(logp))
		opt.UpdateGraph(ctx, in[0].Graph(), loss)
		return loss
	})
	args := []any{tokens, mask, wholeTarget}
	if shared {
		args = []any{prefix, prefixMask, rest, restMask, target}
	}
	if _, err := e.Exec(args...); err != nil {
		b.Fatal(err)
	}
	cpu := startCPU(b)
	for i := 0; i < b.N; i++ {
		if _, err := e.Exec(args...); err != nil {
			b.Fatal(err)
		}
	}
	cpu.stop()
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/step")
}

// BenchmarkTrainStepPrefixWhole / BenchmarkTrainStepPrefixShared: the same
// step without and with the shared-prefix computation.
func BenchmarkTrainStepPrefixWhole(b *testing.B)  { benchmarkTrainStepPrefix(b, false) }
func BenchmarkTrainStepPrefixShared(b *testing.B) { benchmarkTrainStepPrefix(b, true) }

func benchmarkDecode(b *testing.B, batch int) {
	m := newBenchModel(b)
	rng := rand.New(rand.NewPCG(3, 4))
	prompts := randomSeqs(rng, 8192, make([]int, batch)...)
	for i := range prompts {
		prompts[i] = randomSeqs(rng, 8192, benchPrompt)[0]
	}
	opts := GenerateOptions{MaxNewTokens: benchNewTokens} // greedy, no stop: every row makes benchNewTokens
	generate := func() {
		if _, err := m.Generate(prompts, opts); err != nil {
			b.Fatal(err)
		}
	}
	generate() // compile outside the timing
	cpu := startCPU(b)
	for i := 0; i < b.N; i++ {
		generate()
		cpu.lap()
	}
	cpu.stop()
	b.ReportMetric(float64(batch*benchNewTokens*b.N)/b.Elapsed().Seconds(), "tokens/s")
	reportPeakHeap(b, generate)
}

// benchmarkGeneratePrefix: 8 prompts of 448 shared + 64 own tokens (a
// guard prompt's shape), 32 new tokens each, with the shared prefix
// prefilled once or every prompt prefilled whole (NoPrefixReuse).
func benchmarkGeneratePrefix(b *testing.B, reuse bool) {
	m := newBenchModel(b)
	rng := rand.New(rand.NewPCG(5, 6))
	shared := randomSeqs(rng, 8192, 448)[0]
	prompts := make([][]int, 8)
	for i := range prompts {
		prompts[i] = append(append([]int(nil), shared...), randomSeqs(rng, 8192, 64)[0]...)
	}
	opts := GenerateOptions{MaxNewTokens: 32, NoPrefixReuse: !reuse}
	if _, err := m.Generate(prompts, opts); err != nil { // compile outside the timing
		b.Fatal(err)
	}
	cpu := startCPU(b)
	for i := 0; i < b.N; i++ {
		if _, err := m.Generate(prompts, opts); err != nil {
			b.Fatal(err)
		}
	}
	cpu.stop()
}

// BenchmarkGeneratePrefixWhole / BenchmarkGeneratePrefixShared: generation
// from prompts that share most of their tokens, without and with the shared
// prefix computed once.
func BenchmarkGeneratePrefixWhole(b *testing.B)  { benchmarkGeneratePrefix(b, false) }
func BenchmarkGeneratePrefixShared(b *testing.B) { benchmarkGeneratePrefix(b, true) }

// BenchmarkDecode1 / BenchmarkDecode8: greedy generation of 64 tokens after a
// 16-token prompt (prefill included) at batch 1 and 8.
func BenchmarkDecode1(b *testing.B) { benchmarkDecode(b, 1) }
func BenchmarkDecode8(b *testing.B) { benchmarkDecode(b, 8) }

// cpuTime is the CPU time (user + system, all threads) the process has used.
// On a machine shared with other work it is a steadier measure than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuTimer reports CPU seconds per op (metric "cpu-s/op") next to the wall
// time, and the wall time of the fastest op (metric "best-s/op", when the
// loop calls lap after each op): scripts/bench_torch.py compares it with
// PyTorch's best of its runs.
type cpuTimer struct {
	b     *testing.B
	start time.Duration
	last  time.Time
	best  time.Duration
}

func startCPU(b *testing.B) *cpuTimer {
	b.ResetTimer()
	return &cpuTimer{b: b, start: cpuTime(), last: time.Now()}
}

// lap ends one timed op.
func (c *cpuTimer) lap() {
	now := time.Now()
	if d := now.Sub(c.last); c.best == 0 || d < c.best {
		c.best = d
	}
	c.last = now
}

func (c *cpuTimer) stop() float64 {
	s := (cpuTime() - c.start).Seconds() / float64(c.b.N)
	c.b.ReportMetric(s, "cpu-s/op")
	if c.best > 0 {
		c.b.ReportMetric(c.best.Seconds(), "best-s/op")
	}
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
