package localgen_test

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/localgen"
)

// benchSteps is how many steps of the bundled eval split's first
// trajectories BenchmarkGuardStep cycles through.
const benchSteps = 8

// BenchmarkGuardStep times a lone session's guard step (rollout.Guard.Step
// with one input, as serve and mcp run a session that is alone) over the
// first steps of a held-out file's trajectories, with each role's system
// prompt kept across steps (kept) and prefilled at every step (whole),
// greedy as serve decodes. By default the guard is the tiny demo model
// (configs/tiny.yaml: model.DefaultTinyConfig drawn from seed 1, float32,
// the Qwen3 tokenizer, structured calls of at most 40 and 36 tokens) on the
// bundled eval split; with GUARD_BENCH_CONFIG=FILE it is the checkpoint,
// tokenizer, backend and rollout section of that configuration on its
// eval.data (make learn's guard: runs/learn/guard.yaml); with
// MODEL_BENCH_OPS_SEQUENTIAL=1, either runs its graphs' ops one at a time
// (model.ops_sequential). It reports the
// p50 and p90 of the step's wall time, the p50 of its prefill
// (rollout.Timing) and the p50 of its CPU time (user + system, all
// threads), in milliseconds, and logs the load average; the decisions of
// both are the same (TestKeptPrefixStepEqualsWithout).
//
//	go test ./rollout/localgen -run '^$' -bench '^BenchmarkGuardStep$' -benchtime 40x
//	GUARD_BENCH_CONFIG=$PWD/runs/learn/guard.yaml go test ./rollout/localgen -run '^$' -bench '^BenchmarkGuardStep$' -benchtime 40x
func BenchmarkGuardStep(b *testing.B) {
	m, tok, rc, trajs := benchGuard(b)
	greedy := generate.Sampling{Greedy: true, Temperature: 1, TopP: 1}

	// The steps: each trajectory's turns in order, the memory carried from
	// the step before, as a session sends them.
	g, err := rollout.NewGuard(rc, tok, &localgen.Generator{Model: m})
	if err != nil {
		b.Fatal(err)
	}
	var inputs []rollout.StepInput
	var tokens, prefix int // the steps' guard tokens (prompts and outputs of both calls) and their system prompts' share
	for _, tr := range trajs {
		memory := ""
		for t := range tr.Turns {
			if len(inputs) == benchSteps {
				break
			}
			in := rollout.StepInput{UserPrompt: tr.UserPrompt, First: t == 0, Memory: memory, Action: tr.Turns[t].Action}
			if t > 0 {
				in.Previous, in.Observation = &tr.Turns[t-1].Action, tr.Turns[t-1].Observation
			}
			turns, _, err := g.Step([]rollout.StepInput{in}, greedy)
			if err != nil {
				b.Fatal(err)
			}
			inputs = append(inputs, in)
			memory = turns[0].MemoryOut
			tokens, prefix = tokens+turns[0].GuardTokens(), prefix+turns[0].PrefixTokens()
		}
	}
	b.Logf("%d steps of %d trajectories, %d guard tokens a step, %d of them the system prompts; GOMAXPROCS %d; load average %s",
		len(inputs), len(trajs), tokens/len(inputs), prefix/len(inputs), runtime.GOMAXPROCS(0), loadAverage())

	for _, mode := range []struct {
		name   string
		noKeep bool
	}{{"kept", false}, {"whole", true}} {
		b.Run(mode.name, func(b *testing.B) {
			g, err := rollout.NewGuard(rc, tok, &localgen.Generator{Model: m, NoKeptPrefix: mode.noKeep})
			if err != nil {
				b.Fatal(err)
			}
			for _, in := range inputs { // every shape compiled, the prefixes kept
				if _, _, err := g.Step([]rollout.StepInput{in}, greedy); err != nil {
					b.Fatal(err)
				}
			}
			var wall, cpu, prefill []time.Duration
			b.ResetTimer()
			for i := range b.N {
				start, startCPU := time.Now(), processCPU()
				turns, _, err := g.Step([]rollout.StepInput{inputs[i%len(inputs)]}, greedy)
				wall, cpu = append(wall, time.Since(start)), append(cpu, processCPU()-startCPU)
				if err != nil {
					b.Fatal(err)
				}
				prefill = append(prefill, turns[0].Timing().Prefill)
			}
			b.StopTimer()
			b.ReportMetric(percentileMS(wall, 50), "p50-ms")
			b.ReportMetric(percentileMS(wall, 90), "p90-ms")
			b.ReportMetric(percentileMS(prefill, 50), "prefill-p50-ms")
			b.ReportMetric(percentileMS(cpu, 50), "cpu-p50-ms")
			b.Logf("%s: %d steps; load average after %s", mode.name, b.N, loadAverage())
		})
	}
}

// benchGuard returns BenchmarkGuardStep's model, tokenizer, rollout
// settings and trajectories: the tiny demo model's, or with
// GUARD_BENCH_CONFIG those of that configuration file.
func benchGuard(b *testing.B) (*model.Model, *tokenizer.Tokenizer, rollout.Config, []*dataset.Trajectory) {
	if path := os.Getenv("GUARD_BENCH_CONFIG"); path != "" {
		cfg, err := config.Load(path, nil)
		if err != nil {
			b.Fatal(err)
		}
		tok, _, err := cfg.Model.LoadTokenizer()
		if err != nil {
			b.Fatal(err)
		}
		if os.Getenv("MODEL_BENCH_OPS_SEQUENTIAL") == "1" {
			cfg.Model.BackendConfig.OpsSequential = true
		}
		cfg.Model.BackendConfig.ProcessSettings().Apply()
		be, err := backend.New(cfg.Model.BackendConfig)
		if err != nil {
			b.Fatal(err)
		}
		m, err := cfg.Model.LoadModel(be, tok)
		if err != nil {
			b.Fatal(err)
		}
		trajs, err := dataset.ReadAll(cfg.Eval.Data)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: checkpoint %s, held-out %s", path, cfg.Model.Path, cfg.Eval.Data)
		return m, tok, cfg.Rollout, trajs
	}
	bc := backend.Default()
	bc.OpsSequential = os.Getenv("MODEL_BENCH_OPS_SEQUENTIAL") == "1"
	be, err := backend.New(bc)
	if err != nil {
		b.Fatal(err)
	}
	cfg := model.DefaultTinyConfig()
	m, err := model.New(be, &cfg, 1, dtypes.Float32)
	if err != nil {
		b.Fatal(err)
	}
	rc := rollout.DefaultConfig()
	rc.Structured = true
	rc.MaxMemoryTokens, rc.MaxJudgeTokens, rc.MaxObservationTokens = 40, 36, 256
	trajs, err := dataset.ReadAll(filepath.Join("..", "..", "data", "agentdojo-mini", "eval.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	return m, guardtest.Tokenizer(b), rc, trajs
}

// processCPU is the CPU time (user + system, all threads) the process has
// used so far: a step's CPU time moves less with the machine's load than its
// wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentileMS is the p-th percentile of ds (nearest rank), in
// milliseconds.
func percentileMS(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	k := max((p*len(s)+99)/100, 1) // nearest rank: ceil(p/100 · n)
	return float64(s[k-1].Microseconds()) / 1000
}

// loadAverage is /proc/loadavg's first three fields ("?" where it cannot be
// read): benchmarks print the machine's load beside their figures.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// TestPercentileMS pins the nearest-rank percentile the benchmark reports.
func TestPercentileMS(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	cases := []struct {
		ds   []time.Duration
		p    int
		want float64
	}{
		{ms(10, 1, 9, 2, 8, 3, 7, 4, 6, 5), 50, 5},
		{ms(10, 1, 9, 2, 8, 3, 7, 4, 6, 5), 90, 9},
		{ms(10, 1, 9, 2, 8, 3, 7, 4, 6, 5), 91, 10},
		{ms(3), 90, 3},
		{nil, 50, 0},
	}
	for _, c := range cases {
		if got := percentileMS(c.ds, c.p); got != c.want {
			t.Errorf("p%d of %v = %g ms, want %g", c.p, c.ds, got, c.want)
		}
	}
}
