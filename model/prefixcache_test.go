package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/model/backend"
)

// keptRun is one Generate call's generations and every step's log-probs.
type keptRun struct {
	gens  []Generation
	steps map[[2]int][]float32 // (row, step) → log-probs
}

func generateObserved(t *testing.T, m *Model, prompts [][]int, opts GenerateOptions) keptRun {
	t.Helper()
	r := keptRun{steps: map[[2]int][]float32{}}
	opts.observe = func(row, step int, lp []float32) { r.steps[[2]int{row, step}] = slices.Clone(lp) }
	var err error
	if r.gens, err = m.Generate(prompts, opts); err != nil {
		t.Fatal(err)
	}
	return r
}

// maxLogProbDiff returns the largest |a − b| over every step's log-probs,
// after checking that both runs generated the same tokens.
func maxLogProbDiff(t *testing.T, what string, a, b keptRun) float64 {
	t.Helper()
	worst := 0.0
	for i := range a.gens {
		if !slices.Equal(a.gens[i].Tokens, b.gens[i].Tokens) {
			t.Fatalf("%s: row %d: tokens %v and %v", what, i, a.gens[i].Tokens, b.gens[i].Tokens)
		}
		for s := range a.gens[i].Tokens {
			x, y := a.steps[[2]int{i, s}], b.steps[[2]int{i, s}]
			if len(x) == 0 || len(x) != len(y) {
				t.Fatalf("%s: row %d step %d: %d and %d log-probs", what, i, s, len(x), len(y))
			}
			for v := range x {
				worst = math.Max(worst, math.Abs(float64(x[v]-y[v])))
			}
		}
	}
	return worst
}

// TestKeptPrefixEqualsWholePrompt generates with a kept prefix — a lone
// row, a batch, a batch sharing more than the kept prefix, and kept widths
// below, equal to and above the batch's KV capacity — three ways: the call
// that prefills and keeps the prefix, a second call that reuses it, and the
// whole prompt prefilled (NoPrefixReuse). The reusing call must give
// exactly the first call's tokens and log-probs (the same prefix prefilled
// at the same width), and both the whole prompt's tokens with log-probs
// within 1e-5 (float32 rounding), greedy and sampled.
func TestKeptPrefixEqualsWholePrompt(t *testing.T) {
	m := newTestModel(t, testConfig(), 5)
	rng := rand.New(rand.NewPCG(3, 4))
	V := m.cfg.VocabSize
	withPrefix := func(prefix []int, rests ...int) [][]int {
		var out [][]int
		for _, n := range rests {
			out = append(out, append(slices.Clone(prefix), randomSeqs(rng, V, n)[0]...))
		}
		return out
	}
	p40, p130 := randomSeqs(rng, V, 40)[0], randomSeqs(rng, V, 130)[0]
	more := append(slices.Clone(p40), randomSeqs(rng, V, 35)[0]...) // 35 more shared tokens
	cases := []struct {
		name    string
		prompts [][]int
		keep    int
		maxNew  int
		wantS   int // the batch's KV capacity, against the kept width
	}{
		{"one row, width = capacity", withPrefix(p40, 5), 40, 12, 64},
		{"one row, width < capacity", withPrefix(p40, 30), 40, 12, 128},
		{"one row, width > capacity", withPrefix(p130, 5), 130, 5, 192},
		{"three rows", withPrefix(p40, 1, 5, 13), 40, 8, 64},
		{"three rows sharing more", withPrefix(more, 1, 5, 13), 40, 12, 128},
	}
	for _, c := range cases {
		longest := 0
		for _, p := range c.prompts {
			longest = max(longest, len(p))
		}
		if _, S := GenerationShape(len(c.prompts), longest, c.maxNew); S != c.wantS {
			t.Fatalf("%s: capacity %d, want %d (the case does not test what it says)", c.name, S, c.wantS)
		}
		for _, temp := range []float64{0, 0.8} {
			opts := GenerateOptions{MaxNewTokens: c.maxNew, Temperature: temp, Seed: 7, KeepPrefix: c.keep}
			m.DropKeptPrefixes()
			hits, misses := m.PrefixCacheStats()
			first := generateObserved(t, m, c.prompts, opts)
			second := generateObserved(t, m, c.prompts, opts)
			if h, mi := m.PrefixCacheStats(); h != hits+1 || mi != misses+1 {
				t.Fatalf("%s: %d hits and %d misses, want 1 and 1", c.name, h-hits, mi-misses)
			}
			if d := maxLogProbDiff(t, c.name+": kept vs reused", first, second); d != 0 {
				t.Errorf("%s T=%g: reusing the kept prefix changed log-probs by %g", c.name, temp, d)
			}
			opts.NoPrefixReuse = true
			whole := generateObserved(t, m, c.prompts, opts)
			if d := maxLogProbDiff(t, c.name+": kept vs whole", second, whole); d > 1e-5 {
				t.Errorf("%s T=%g: max |kept prefix − whole prompt| log-prob = %g > 1e-5", c.name, temp, d)
			} else {
				t.Logf("%s T=%g: max |kept prefix − whole prompt| log-prob = %.3g", c.name, temp, d)
			}
		}
	}
}

// TestKeptPrefixNotUsed: a KeepPrefix that not every prompt starts with,
// or that leaves a prompt no token of its own, keeps nothing.
func TestKeptPrefixNotUsed(t *testing.T) {
	m := newTestModel(t, testConfig(), 5)
	rng := rand.New(rand.NewPCG(5, 6))
	a := randomSeqs(rng, m.cfg.VocabSize, 50)[0]
	b := slices.Clone(a)
	b[20]++ // the rows differ inside the 40 tokens to keep
	b[20] %= m.cfg.VocabSize
	for _, prompts := range [][][]int{{a, b}, {a[:40]}} {
		if _, err := m.Generate(prompts, GenerateOptions{MaxNewTokens: 2, KeepPrefix: 40}); err != nil {
			t.Fatal(err)
		}
		if h, mi := m.PrefixCacheStats(); h+mi != 0 {
			t.Fatalf("prompts of lengths %d: %d hits and %d misses, want none", len(prompts[0]), h, mi)
		}
	}
}

// TestKeptPrefixDroppedWhenWeightsChange: a kept prefix computed before a
// weight update (a graph that sets a variable, as a training step does) is
// not reused after it: the next call prefills it again and generates what
// the whole prompt under the new weights gives; and at most
// MaxKeptPrefixes prefixes are kept, the least recently used dropped.
func TestKeptPrefixDroppedWhenWeightsChange(t *testing.T) {
	m := newTestModel(t, testConfig(), 8)
	rng := rand.New(rand.NewPCG(7, 8))
	prefix := randomSeqs(rng, m.cfg.VocabSize, 40)[0]
	prompts := [][]int{append(slices.Clone(prefix), randomSeqs(rng, m.cfg.VocabSize, 9)[0]...)}
	opts := GenerateOptions{MaxNewTokens: 8, KeepPrefix: 40}
	before := generateObserved(t, m, prompts, opts)

	update := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, g *Graph) *Node {
		for v := range ctx.IterVariables() {
			v.SetValueGraph(MulScalar(v.ValueGraph(g), 1.5))
		}
		return ScalarZero(g, m.DType())
	})
	if _, err := update.Exec(); err != nil {
		t.Fatal(err)
	}
	after := generateObserved(t, m, prompts, opts)
	if h, mi := m.PrefixCacheStats(); h != 0 || mi != 2 {
		t.Fatalf("%d hits and %d misses, want 0 and 2: the prefix kept under the old weights was reused", h, mi)
	}
	opts.NoPrefixReuse = true
	whole := generateObserved(t, m, prompts, opts)
	if d := maxLogProbDiff(t, "after the update: kept vs whole", after, whole); d > 1e-5 {
		t.Errorf("after the update: max |kept prefix − whole prompt| log-prob = %g > 1e-5", d)
	}
	changed := 0.0
	for v, x := range before.steps[[2]int{0, 0}] {
		changed = math.Max(changed, math.Abs(float64(x-after.steps[[2]int{0, 0}][v])))
	}
	if changed < 1e-3 {
		t.Fatalf("the update changed the first step's log-probs by %g only: the test does not test an update", changed)
	}

	// Bounded: MaxKeptPrefixes + 1 prefixes, then the first again.
	opts.NoPrefixReuse = false
	m.DropKeptPrefixes()
	var firsts [][]int
	for range MaxKeptPrefixes + 1 {
		firsts = append(firsts, randomSeqs(rng, m.cfg.VocabSize, 41)[0])
		if _, err := m.Generate(firsts[len(firsts)-1:], opts); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(m.kept.entries); n != MaxKeptPrefixes {
		t.Fatalf("%d prefixes kept, want %d", n, MaxKeptPrefixes)
	}
	_, misses := m.PrefixCacheStats()
	if _, err := m.Generate(firsts[:1], opts); err != nil {
		t.Fatal(err)
	}
	if _, mi := m.PrefixCacheStats(); mi != misses+1 {
		t.Fatal("the least recently used prefix was still kept")
	}
}

// TestKeptPrefixConcurrent: generations that share a kept prefix from
// several goroutines at once (one computing it, the others waiting or
// reusing it, one dropping them all meanwhile) give the tokens a lone
// generation gives. Run it with -race: its backend runs ops in program
// order, since simplego's parallel scheduler is itself reported by the
// race detector.
func TestKeptPrefixConcurrent(t *testing.T) {
	bc := backend.Default()
	bc.OpsSequential = true
	be, err := backend.New(bc)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(be, testConfig(), 9, dtypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 10))
	prefix := randomSeqs(rng, m.cfg.VocabSize, 40)[0]
	var prompts [][]int
	for range 4 {
		prompts = append(prompts, append(slices.Clone(prefix), randomSeqs(rng, m.cfg.VocabSize, 7)[0]...))
	}
	opts := GenerateOptions{MaxNewTokens: 6, KeepPrefix: 40}
	want := make([][]int, len(prompts))
	for i, p := range prompts {
		g, err := m.Generate([][]int{p}, GenerateOptions{MaxNewTokens: 6, NoPrefixReuse: true})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = g[0].Tokens
	}
	m.DropKeptPrefixes()
	got := make([][]int, len(prompts))
	errs := make([]error, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 2 {
				m.DropKeptPrefixes()
			}
			g, err := m.Generate([][]int{p}, opts)
			if errs[i] = err; err == nil {
				got[i] = g[0].Tokens
			}
		}()
	}
	wg.Wait()
	for i := range prompts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("prompt %d: %v at once, %v alone", i, got[i], want[i])
		}
	}
}
