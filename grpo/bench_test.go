package grpo

import (
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/model"
)

// The update benchmark: one GRPO optimizer step (forward, backward, AdamW) on the demo's
// recorded first batch (testdata/demo_batch.json.gz, written by scripts/record-batch:
// 56 sequences of 503–882 tokens, 840 trained tokens, with reference log-probs), from the
// demo's starting model (configs/tiny.yaml: hidden 64, 2 layers, vocabulary 151,936, seed 1)
// with its grpo settings (lr 1e-3, β 0.04, micro-batches of 16). Every saving on, and each
// turned off. scripts/bench_update_torch.py does the same step in PyTorch; make bench prints
// the two side by side. It reports seconds per step, the peak live heap during the step (MB,
// sampled from runtime/metrics every millisecond) and the trainer's state (MB: gradient
// accumulators and AdamW moments). BenchmarkLoRAUpdate takes the same step training a LoRA
// adapter (rank 16, α 32, every projection) on the frozen model instead; make bench prints it
// beside the full update.

// updateSavings says which savings of the update are on.
type updateSavings struct {
	chunk   bool // the LM head over vocabulary chunks (model.lm_head_chunk)
	shared  bool // the shared prompt prefix once per micro-batch (grpo.shared_prefix)
	blocked bool // attention over query blocks, recomputed in the backward (model.attention_block)
	lora    int  // the rank of a LoRA adapter trained instead of the weights; 0 = full fine-tuning
}

func benchmarkUpdate(b *testing.B, s updateSavings) {
	batch, rec, err := ReadRecordedBatch("testdata/demo_batch.json.gz")
	if err != nil {
		b.Fatal(err)
	}
	mcfg := model.DefaultTinyConfig()
	m, err := model.New(backend(b), &mcfg, 1, dtypes.Float32)
	if err != nil {
		b.Fatal(err)
	}
	if !s.chunk {
		m.SetLMHeadChunk(0)
	}
	if !s.blocked {
		m.SetAttentionBlock(0)
	}
	if s.lora > 0 {
		if err := m.AddAdapter(model.LoRAConfig{Rank: s.lora, Alpha: 32, Targets: model.DefaultLoRAConfig().Targets}, 1, ""); err != nil {
			b.Fatal(err)
		}
	}
	cfg := DefaultConfig()
	cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.MicroBatchSize, cfg.SharedPrefix = 1e-3, 0, 0.04, 16, s.shared
	T := rec.Temperature
	tr, err := NewTrainer(backend(b), m.Context(), func(ctx *context.Context, tokens, attn, pos *Node) *Node {
		return m.TokenLogProbs(ctx, tokens, attn, pos, T)
	}, cfg, 0)
	if err != nil {
		b.Fatal(err)
	}
	tr.SetSharedPolicy(func(ctx *context.Context, prefix, prefixMask, tokens, attn, pos *Node) *Node {
		return m.TokenLogProbsShared(ctx, prefix, prefixMask, tokens, attn, pos, T)
	})
	first, err := tr.Step(batch) // compiles the graphs
	if err != nil {
		b.Fatal(err)
	}
	var peak uint64
	cpu0 := cpuSeconds()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		runtime.GC()
		stop := sampleHeap(&peak)
		b.StartTimer()
		if _, err := tr.Step(batch); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		stop()
		b.StartTimer()
	}
	b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
	b.ReportMetric(first.GradNorm, "first-grad-norm") // the same update as PyTorch's: compare
	var state uint64
	for v := range m.Context().IterVariables() {
		if strings.HasPrefix(v.Scope(), StateScope) {
			state += uint64(v.Shape().Memory())
		}
	}
	b.ReportMetric(float64(state)/1e6, "optimizer-MB")
}

// cpuSeconds is the process's user + system CPU time so far (all threads; steadier than wall
// time on a shared machine).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// sampleHeap records the largest live heap (heap objects' bytes) seen every millisecond
// into *peak until the returned function is called.
func sampleHeap(peak *uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			*peak = max(*peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

func BenchmarkUpdate(b *testing.B) {
	benchmarkUpdate(b, updateSavings{chunk: true, shared: true, blocked: true})
}
func BenchmarkUpdateNoChunk(b *testing.B) {
	benchmarkUpdate(b, updateSavings{shared: true, blocked: true})
}
func BenchmarkUpdateNoShared(b *testing.B) {
	benchmarkUpdate(b, updateSavings{chunk: true, blocked: true})
}
func BenchmarkUpdateNoBlocked(b *testing.B) {
	benchmarkUpdate(b, updateSavings{chunk: true, shared: true})
}
func BenchmarkUpdateNoSavings(b *testing.B) { benchmarkUpdate(b, updateSavings{}) }

// BenchmarkLoRAUpdate is BenchmarkUpdate (every saving on) training a rank-16 LoRA adapter.
func BenchmarkLoRAUpdate(b *testing.B) {
	benchmarkUpdate(b, updateSavings{chunk: true, shared: true, blocked: true, lora: 16})
}

// benchmarkCheckpointing times one optimizer step of an 8-layer Qwen3 (hidden 128, MLP 384,
// 4 query / 2 KV heads of 32, vocabulary 1000) on 4 rows of 512 tokens (the last 64 trained)
// with and without activation checkpointing: seconds and CPU seconds per step, and the peak
// heap of one more step run with the Go GC made eager (GC percent 5), so that the heap is
// what the step holds.
func benchmarkCheckpointing(b *testing.B, ckpt bool) {
	mcfg := model.DefaultTinyConfig()
	mcfg.VocabSize, mcfg.HiddenSize, mcfg.IntermediateSize, mcfg.NumHiddenLayers = 1000, 128, 384, 8
	mcfg.NumAttentionHeads, mcfg.NumKeyValueHeads, mcfg.HeadDim, mcfg.BOSTokenID, mcfg.EOSTokenIDs = 4, 2, 32, 0, []int{1}
	m, err := model.New(backend(b), &mcfg, 1, dtypes.Float32)
	if err != nil {
		b.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.MicroBatchSize, cfg.GradientCheckpointing = 1e-4, 0, 0, 4, ckpt
	tr, err := NewTrainer(backend(b), m.Context(), func(ctx *context.Context, tokens, attn, pos *Node) *Node {
		return m.TokenLogProbs(ctx, tokens, attn, pos, 1)
	}, cfg, 0)
	if err != nil {
		b.Fatal(err)
	}
	tr.SetStagedPolicy(modelStages(m, 1))
	rng := rand.New(rand.NewPCG(1, 2))
	var seqs []Sequence
	for i := range 4 {
		s := Sequence{Phase: PhaseMemory, Advantage: float32(i) - 1.5}
		for range 448 {
			s.Prompt = append(s.Prompt, int32(2+rng.IntN(998)))
		}
		for range 64 {
			s.Completion = append(s.Completion, int32(2+rng.IntN(998)))
		}
		seqs = append(seqs, s)
	}
	batch, err := NewBatch(seqs)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tr.Step(batch); err != nil { // compiles the graphs
		b.Fatal(err)
	}
	cpu0 := cpuSeconds()
	b.ResetTimer()
	for range b.N {
		if _, err := tr.Step(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/op")
	// The peak heap of one more step, untimed, with the GC made eager (GC percent 5) so that
	// the heap is what the step holds rather than garbage.
	old := debug.SetGCPercent(5)
	runtime.GC()
	var peak uint64
	stop := sampleHeap(&peak)
	if _, err := tr.Step(batch); err != nil {
		b.Fatal(err)
	}
	stop()
	debug.SetGCPercent(old)
	b.ReportMetric(float64(peak)/1e6, "peak-heap-MB")
}

func BenchmarkStepCheckpointed(b *testing.B) { benchmarkCheckpointing(b, true) }
func BenchmarkStepWhole(b *testing.B)        { benchmarkCheckpointing(b, false) }
