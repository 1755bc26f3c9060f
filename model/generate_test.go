package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// logs returns the log of each probability.
func logs(p ...float64) []float32 {
	out := make([]float32, len(p))
	for i, x := range p {
		out[i] = float32(math.Log(x))
	}
	return out
}

// TestSamplerGreedy pins greedy choices under each kind of constraint.
func TestSamplerGreedy(t *testing.T) {
	lp := logs(0.1, 0.3, 0.3, 0.25, 0.05) // ids 1 and 2 tie
	cases := []struct {
		c    Constraint
		want int
	}{
		{Constraint{}, 1}, // first id on ties
		{Ban(1), 2},
		{Ban(1, 2), 3},
		{Allow(4, 0), 0},
		{Allow(4), 4},
		{Force(4), 4},
	}
	for _, c := range cases {
		s := newSampler(len(lp), GenerateOptions{}, 0)
		got, err := s.pick(lp, c.c)
		if err != nil || got != c.want {
			t.Errorf("%+v: got %d, %v; want %d", c.c, got, err, c.want)
		}
	}
}

// TestSamplerDistributions draws 40,000 samples per case and compares the
// frequencies with the hand-computed renormalized distributions (5σ ≈ 0.012).
func TestSamplerDistributions(t *testing.T) {
	lp := logs(0.5, 0.3, 0.1, 0.05, 0.05)
	cases := []struct {
		name string
		opts GenerateOptions
		c    Constraint
		want []float64
	}{
		{"free", GenerateOptions{Temperature: 1}, Constraint{}, []float64{0.5, 0.3, 0.1, 0.05, 0.05}},
		{"top-k 2", GenerateOptions{Temperature: 1, TopK: 2}, Constraint{}, []float64{0.625, 0.375, 0, 0, 0}},
		{"top-p 0.6", GenerateOptions{Temperature: 1, TopP: 0.6}, Constraint{}, []float64{0.625, 0.375, 0, 0, 0}},
		{"top-p 0.45", GenerateOptions{Temperature: 1, TopP: 0.45}, Constraint{}, []float64{1, 0, 0, 0, 0}},
		{"top-k 3 then top-p 0.8", GenerateOptions{Temperature: 1, TopK: 3, TopP: 0.8}, Constraint{}, []float64{0.625, 0.375, 0, 0, 0}},
		{"top-p 1 is off", GenerateOptions{Temperature: 1, TopP: 1}, Constraint{}, []float64{0.5, 0.3, 0.1, 0.05, 0.05}},
		{"allow", GenerateOptions{Temperature: 1}, Allow(2, 3, 4), []float64{0, 0, 0.5, 0.25, 0.25}},
		{"ban", GenerateOptions{Temperature: 1}, Ban(0), []float64{0, 0.6, 0.2, 0.1, 0.1}},
		{"ban with top-k", GenerateOptions{Temperature: 1, TopK: 2}, Ban(0), []float64{0, 0.75, 0.25, 0, 0}},
		{"force", GenerateOptions{Temperature: 1}, Force(3), []float64{0, 0, 0, 1, 0}},
	}
	const n = 40000
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.opts.Seed = 42
			s := newSampler(len(lp), c.opts, 0)
			counts := make([]float64, len(lp))
			for i := 0; i < n; i++ {
				id, err := s.pick(lp, c.c)
				if err != nil {
					t.Fatal(err)
				}
				counts[id]++
			}
			for id := range counts {
				if f := counts[id] / n; math.Abs(f-c.want[id]) > 0.012 || (c.want[id] == 0 && f != 0) {
					t.Errorf("id %d: frequency %.4f, want %.4f", id, f, c.want[id])
				}
			}
		})
	}
}

func TestSamplerErrors(t *testing.T) {
	lp := logs(0.5, 0.5)
	cases := []struct {
		c    Constraint
		want string
	}{
		{Force(2), "outside the vocabulary"},
		{Constraint{Kind: ForceToken}, "one token"},
		{Allow(), "no tokens"},
		{Allow(-1), "outside the vocabulary"},
		{Ban(0, 1), "whole vocabulary"},
		{Constraint{Kind: 9}, "unknown constraint"},
	}
	for _, c := range cases {
		s := newSampler(len(lp), GenerateOptions{Temperature: 1}, 0)
		if _, err := s.pick(lp, c.c); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.c, err, c.want)
		}
	}
}

// TestGenerateConstrainedAndStopped forces a prefix through the hook, stops
// on a stop token, and checks the reported log-probs are the unconstrained
// ones of the full forward pass.
func TestGenerateConstrainedAndStopped(t *testing.T) {
	m := newTestModel(t, testConfig(), 5)
	prompts := [][]int{{3, 9, 27}, {81, 243 % 256, 200, 100, 50}}
	forced := []int{10, 11, 12}
	var seen [][]int
	opts := GenerateOptions{
		MaxNewTokens: 8, Temperature: 0.9, Seed: 1, StopTokens: []int{12},
		Constrain: func(row int, generated []int) Constraint {
			if row == 0 {
				seen = append(seen, slices.Clone(generated))
				return Force(forced[len(generated)])
			}
			return Ban(12) // row 1 can never stop
		},
	}
	gens, err := m.Generate(prompts, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gens[0].Tokens, forced) || !gens[0].Stopped {
		t.Errorf("row 0: %v stopped=%v, want %v stopped", gens[0].Tokens, gens[0].Stopped, forced)
	}
	if len(seen) != 3 || len(seen[0]) != 0 || !slices.Equal(seen[2], forced[:2]) {
		t.Errorf("Constrain saw %v", seen)
	}
	if len(gens[1].Tokens) != 8 || gens[1].Stopped || slices.Contains(gens[1].Tokens, 12) {
		t.Errorf("row 1: %v stopped=%v", gens[1].Tokens, gens[1].Stopped)
	}
	for i, g := range gens {
		full := fullLogProbs(t, m, append(slices.Clone(prompts[i]), g.Tokens...), 0.9)
		for k, id := range g.Tokens {
			if d := math.Abs(float64(g.LogProbs[k]) - full[len(prompts[i])-1+k][id]); d > 1e-5 {
				t.Errorf("row %d token %d: log-prob %g off by %g", i, k, g.LogProbs[k], d)
			}
		}
	}
}

// TestGenerateReproducible checks that a seed fixes the samples, that rows do
// not depend on how they are batched, and that another seed differs.
func TestGenerateReproducible(t *testing.T) {
	m := newTestModel(t, testConfig(), 6)
	prompts := randomSeqs(rand.New(rand.NewPCG(1, 1)), m.cfg.VocabSize, 4, 7, 2)
	opts := GenerateOptions{MaxNewTokens: 12, Temperature: 1, TopP: 0.95, Seed: 99}
	a, err := m.Generate(prompts, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxBatch = 1
	b, err := m.Generate(prompts, opts)
	if err != nil {
		t.Fatal(err)
	}
	opts.Seed = 100
	c, err := m.Generate(prompts, opts)
	if err != nil {
		t.Fatal(err)
	}
	same := true
	for i := range prompts {
		if !slices.Equal(a[i].Tokens, b[i].Tokens) {
			t.Errorf("row %d: batched %v, one by one %v", i, a[i].Tokens, b[i].Tokens)
		}
		same = same && slices.Equal(a[i].Tokens, c[i].Tokens)
	}
	if same {
		t.Error("seeds 99 and 100 gave the same samples")
	}
}

func TestGenerateRejectsBadInput(t *testing.T) {
	m := newTestModel(t, testConfig(), 7)
	cases := []struct {
		prompts [][]int
		opts    GenerateOptions
		want    string
	}{
		{[][]int{{1}}, GenerateOptions{}, "MaxNewTokens"},
		{[][]int{{}}, GenerateOptions{MaxNewTokens: 1}, "prompt 0 is empty"},
		{[][]int{{1}, {256}}, GenerateOptions{MaxNewTokens: 1}, "prompt 1 token 0"},
		{[][]int{{1}}, GenerateOptions{MaxNewTokens: 1, Temperature: -1}, "Temperature"},
		{[][]int{{1}}, GenerateOptions{MaxNewTokens: 1, TopP: 2}, "TopP"},
		{[][]int{{1}}, GenerateOptions{MaxNewTokens: 600}, "max_position_embeddings"},
		{[][]int{{1}}, GenerateOptions{MaxNewTokens: 2, Constrain: func(int, []int) Constraint { return Force(999) }}, "row 0 step 0"},
	}
	for _, c := range cases {
		if _, err := m.Generate(c.prompts, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %+v: error %v, want %q", c.prompts, c.opts, err, c.want)
		}
	}
}

// TestSharedPrefixLen pins the common prefix that generation prefills once.
func TestSharedPrefixLen(t *testing.T) {
	cases := []struct {
		prompts [][]int
		want    int
	}{
		{[][]int{{1, 2, 3, 4}, {1, 2, 3, 4}}, 3}, // identical: all but the last token
		{[][]int{{1, 2, 3, 4}, {1, 2, 9, 4}}, 2},
		{[][]int{{1, 2, 3}, {1, 2, 3, 4, 5}}, 2}, // one is a prefix of the other
		{[][]int{{7, 2}, {1, 2}}, 0},
		{[][]int{{5, 6, 7}}, 2},
		{[][]int{{5}, {5}}, 0},
	}
	for _, c := range cases {
		if got := sharedPrefixLen(c.prompts); got != c.want {
			t.Errorf("sharedPrefixLen(%v) = %d, want %d", c.prompts, got, c.want)
		}
	}
}

// TestSharedPrefixEqualsRows generates from prompts that share a 40-token
// prefix (prefilled once, then broadcast) and again with NoPrefixReuse
// (every prompt prefilled whole): same tokens, and every step's log-probs
// within 1e-5, greedy and sampled, with rows of different lengths and a
// batch that is not a power of two.
func TestSharedPrefixEqualsRows(t *testing.T) {
	m := newTestModel(t, testConfig(), 5)
	rng := rand.New(rand.NewPCG(9, 9))
	prefix := randomSeqs(rng, m.cfg.VocabSize, 40)[0]
	var prompts [][]int
	for _, n := range []int{1, 5, 13} {
		prompts = append(prompts, append(slices.Clone(prefix), randomSeqs(rng, m.cfg.VocabSize, n)[0]...))
	}
	if P := sharedPrefixLen(prompts); P != 40 {
		t.Fatalf("shared prefix %d, want 40", P)
	}
	for _, temp := range []float64{0, 0.8} {
		run := func(noReuse bool) ([]Generation, map[[2]int][]float32) {
			steps := map[[2]int][]float32{}
			opts := GenerateOptions{MaxNewTokens: 12, Temperature: temp, Seed: 4, NoPrefixReuse: noReuse}
			opts.observe = func(row, step int, lp []float32) { steps[[2]int{row, step}] = slices.Clone(lp) }
			gens, err := m.Generate(prompts, opts)
			if err != nil {
				t.Fatal(err)
			}
			return gens, steps
		}
		before := m.sharedPrefills.Load()
		shared, sharedSteps := run(false)
		if m.sharedPrefills.Load() != before+1 {
			t.Fatal("the shared prefix was not prefilled once")
		}
		whole, wholeSteps := run(true)
		if m.sharedPrefills.Load() != before+1 {
			t.Fatal("NoPrefixReuse still prefilled a shared prefix")
		}
		worst := 0.0
		for i := range whole {
			if !slices.Equal(shared[i].Tokens, whole[i].Tokens) {
				t.Fatalf("T=%g row %d: tokens %v with the shared prefix, %v without", temp, i, shared[i].Tokens, whole[i].Tokens)
			}
			for s := range whole[i].Tokens {
				a, b := sharedSteps[[2]int{i, s}], wholeSteps[[2]int{i, s}]
				for v := range b {
					worst = math.Max(worst, math.Abs(float64(a[v]-b[v])))
				}
			}
		}
		if worst > 1e-5 {
			t.Errorf("T=%g: max |shared prefix - whole prompt| log-prob = %g > 1e-5", temp, worst)
		}
		t.Logf("T=%g: max |shared prefix - whole prompt| log-prob = %.3g", temp, worst)
	}
}

// TestGenerateManyShapes: a long eval or a server meets many (rows, KV
// capacity) buckets; each is a graph of the extend executable, and more
// than GoMLX's default cache of 32 graphs must not fail a call (a 400-
// trajectory synth eval did).
func TestGenerateManyShapes(t *testing.T) {
	m := newTestModel(t, testConfig(), 6)
	rng := rand.New(rand.NewPCG(1, 2))
	shapes := map[[2]int]bool{}
	for _, rows := range []int{1, 2, 4, 8, 16, 24, 32} {
		for _, length := range []int{20, 50, 100, 150, 200} {
			lengths := make([]int, rows)
			for i := range lengths {
				lengths[i] = length
			}
			B, S := GenerationShape(rows, length, 2)
			shapes[[2]int{B, S}] = true
			gens, err := m.Generate(randomSeqs(rng, m.cfg.VocabSize, lengths...), GenerateOptions{MaxNewTokens: 2, NoPrefixReuse: true})
			if err != nil {
				t.Fatalf("%d rows of %d tokens (%d shapes so far): %v", rows, length, len(shapes), err)
			}
			if len(gens) != rows || len(gens[0].Tokens) != 2 {
				t.Fatalf("%d rows of %d tokens: %d generations, the first of %d tokens", rows, length, len(gens), len(gens[0].Tokens))
			}
		}
	}
	if len(shapes) <= 32 {
		t.Fatalf("only %d distinct shapes: the test does not pass the default cache", len(shapes))
	}
}
