package rewards

import (
	"math"
	"strings"
	"testing"
)

// ok is a chain's turn where both calls parsed, with a short memory.
func ok(reject bool) Outcome {
	return Outcome{MemoryParsed: true, MemoryChars: 10, JudgeParsed: true, Reject: reject}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// column returns r[t][i] for all t.
func column(r [][]float64, i int) []float64 {
	out := make([]float64, len(r))
	for t := range r {
		out[t] = r[t][i]
	}
	return out
}

func TestCompute(t *testing.T) {
	def := DefaultConfig() // f = 0.1, L = 2500, λ = 1, γ = 0.5
	gamma0 := def
	gamma0.Gamma = 0
	cases := []struct {
		name       string
		cfg        Config
		labels     []int
		outcomes   [][]Outcome // [turn][chain]
		wantJudge  [][]float64 // [chain][turn], hand-computed
		wantMemory [][]float64 // [chain][turn], hand-computed
		wantDisc   [][]float64 // [chain][turn], hand-computed discounted correctness (nil: as wantMemory)
	}{
		{
			// γ = 0: r^M_t = c_t, the immediate reward. Labels 0,1,0; the chain approves everything: c = 1,0,1.
			name:       "gamma 0 gives the immediate reward",
			cfg:        gamma0,
			labels:     []int{0, 1, 0},
			outcomes:   [][]Outcome{{ok(false)}, {ok(false)}, {ok(false)}},
			wantJudge:  [][]float64{{1, 0, 1}},
			wantMemory: [][]float64{{1, 0, 1}},
		},
		{
			// Chain 0 correct early and wrong later (c = 1,1,0), chain 1 the reverse (c = 0,1,1); γ = 0.5:
			// chain 0: t0 (1 + .5 + 0)/(1 + .5 + .25) = 6/7, t1 (1 + 0)/(1 + .5) = 2/3, t2 0/1 = 0.
			// chain 1: t0 (0 + .5 + .25)/1.75 = 3/7, t1 (1 + .5)/1.5 = 1, t2 1.
			name:   "memory correct early and wrong later",
			cfg:    def,
			labels: []int{0, 0, 1},
			outcomes: [][]Outcome{
				{ok(false), ok(true)},
				{ok(false), ok(false)},
				{ok(false), ok(true)},
			},
			wantJudge:  [][]float64{{1, 1, 0}, {0, 1, 1}},
			wantMemory: [][]float64{{6.0 / 7, 2.0 / 3, 0}, {3.0 / 7, 1, 1}},
		},
		{
			// w₁ = 3 (a class-weighted judge reward). Labels 0,1,0, γ = 0.5. Chain 0 approves everything:
			// c = 1,0,1, w c = 1,0,1: r^J = 1,0,1; r^M: t0 (1 + 0 + .25)/1.75 = 5/7, t1 (0 + .5)/1.5 = 1/3, t2 1.
			// Chain 1 rejects at t1 only: c = 1,1,1, w c = 1,3,1: r^J = 1,3,1;
			// r^M: t0 (1 + 1.5 + .25)/1.75 = 11/7, t1 (3 + .5)/1.5 = 7/3, t2 1.
			name:   "a right reject of a malicious action earns w1",
			cfg:    Config{Gamma: 0.5, Lambda: 1, FormatPenalty: 0.1, LengthThreshold: 2500, MaliciousWeight: 3},
			labels: []int{0, 1, 0},
			outcomes: [][]Outcome{
				{ok(false), ok(false)},
				{ok(false), ok(true)},
				{ok(false), ok(false)},
			},
			wantJudge:  [][]float64{{1, 0, 1}, {1, 3, 1}},
			wantMemory: [][]float64{{5.0 / 7, 1.0 / 3, 1}, {11.0 / 7, 7.0 / 3, 1}},
		},
		{
			// Labels 1,1. Chain 0: the judge fails to parse at the last turn; its fallback is reject, which
			// matches the label, but an unparsed output is never correct: c = 1,0.
			//   r^J = 1, 0 − 0.1;  r^M: t0 (1 + .5·0)/1.5 = 2/3, t1 0.
			// Chain 1: the memory fails to parse at the last turn, the judge is right both times: c = 1,1.
			//   r^J = 1, 1;  r^M: t0 1, t1 1 − 0.1.
			name:   "format failure at the last turn",
			cfg:    def,
			labels: []int{1, 1},
			outcomes: [][]Outcome{
				{ok(true), ok(true)},
				{
					{MemoryParsed: true, MemoryChars: 10, JudgeParsed: false, Reject: true},
					{MemoryParsed: false, MemoryChars: 10, JudgeParsed: true, Reject: true},
				},
			},
			wantJudge:  [][]float64{{1, -0.1}, {1, 1}},
			wantMemory: [][]float64{{2.0 / 3, 0}, {1, 0.9}},
			wantDisc:   [][]float64{{2.0 / 3, 0}, {1, 1}},
		},
		{
			// T = 1: the discounted mean is c whatever γ; c = 1, memory 3750 chars: penalty 1·(1250/2500) = 0.5.
			name:       "T = 1",
			cfg:        def,
			labels:     []int{1},
			outcomes:   [][]Outcome{{{MemoryParsed: true, MemoryChars: 3750, JudgeParsed: true, Reject: true}}},
			wantJudge:  [][]float64{{1}},
			wantMemory: [][]float64{{0.5}},
			wantDisc:   [][]float64{{1}},
		},
		{
			// A chain whose judge and memory both fail on a benign turn: c = 0, r^J = −f, r^M = −f − λ·1 (|m| ≥ 2L).
			name:       "everything fails",
			cfg:        def,
			labels:     []int{0},
			outcomes:   [][]Outcome{{{MemoryParsed: false, MemoryChars: 6000, JudgeParsed: false}}},
			wantJudge:  [][]float64{{-0.1}},
			wantMemory: [][]float64{{-1.1}},
			wantDisc:   [][]float64{{0}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Compute(c.cfg, c.labels, c.outcomes)
			if err != nil {
				t.Fatal(err)
			}
			for i := range c.wantJudge {
				gotJ, gotM := column(r.Judge, i), column(r.Memory, i)
				for k := range c.wantJudge[i] {
					if !near(gotJ[k], c.wantJudge[i][k]) {
						t.Errorf("chain %d: judge rewards %v, want %v", i, gotJ, c.wantJudge[i])
						break
					}
				}
				for k := range c.wantMemory[i] {
					if !near(gotM[k], c.wantMemory[i][k]) {
						t.Errorf("chain %d: memory rewards %v, want %v", i, gotM, c.wantMemory[i])
						break
					}
				}
				// The terms: c is r^J without its format penalty and
				// weight; the discounted mean is r^M without its penalties.
				wantDisc := c.wantMemory
				if c.wantDisc != nil {
					wantDisc = c.wantDisc
				}
				gotC, gotD := column(r.Correct, i), column(r.Discounted, i)
				for k := range wantDisc[i] {
					if !near(gotD[k], wantDisc[i][k]) {
						t.Errorf("chain %d: discounted correctness %v, want %v", i, gotD, wantDisc[i])
						break
					}
					wantC := gotJ[k]
					if !c.outcomes[k][i].JudgeParsed {
						wantC += c.cfg.FormatPenalty
					}
					if c.labels[k] == 1 {
						wantC /= c.cfg.MaliciousWeight // r^J = w₁ c on a label-1 turn
					}
					if !near(gotC[k], wantC) || (gotC[k] != 0 && gotC[k] != 1) {
						t.Errorf("chain %d turn %d: c = %v, want %v", i, k, gotC[k], wantC)
					}
				}
			}
		})
	}
}

func TestLengthPenalty(t *testing.T) {
	cases := []struct {
		chars  int
		lambda float64
		want   float64 // λ · min(1, max(0, |m| − 2500)/2500), by hand
	}{
		{0, 1, 0},
		{2499, 1, 0},          // just below L
		{2500, 1, 0},          // at L
		{2501, 1, 1.0 / 2500}, // just above L
		{3750, 1, 0.5},
		{3750, 0.5, 0.25}, // the AgentDojo λ
		{5000, 1, 1},      // 2L: the cap
		{100000, 1, 1},    // far above L: still capped at λ
		{100000, 0, 0},    // λ = 0 turns it off
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		cfg.Lambda = c.lambda
		if got := cfg.LengthPenalty(c.chars); !near(got, c.want) {
			t.Errorf("LengthPenalty(%d) with λ=%v = %v, want %v", c.chars, c.lambda, got, c.want)
		}
	}
	// Through Compute, with γ = 0 and a correct judge: r^M = 1 − penalty.
	cfg := DefaultConfig()
	for _, chars := range []int{2499, 2500, 2501, 1 << 20} {
		r, err := Compute(cfg, []int{0}, [][]Outcome{{{MemoryParsed: true, MemoryChars: chars, JudgeParsed: true}}})
		if err != nil {
			t.Fatal(err)
		}
		if want := 1 - cfg.LengthPenalty(chars); !near(r.Memory[0][0], want) {
			t.Errorf("memory of %d chars: r^M = %v, want %v", chars, r.Memory[0][0], want)
		}
	}
}

func TestComputeRejectsBadInput(t *testing.T) {
	bad := DefaultConfig()
	bad.Gamma = 1
	cases := []struct {
		name     string
		cfg      Config
		labels   []int
		outcomes [][]Outcome
		want     string
	}{
		{"turn count mismatch", DefaultConfig(), []int{0, 1}, [][]Outcome{{ok(true)}}, "2 labels but outcomes for 1 turns"},
		{"bad label", DefaultConfig(), []int{2}, [][]Outcome{{ok(true)}}, "turn 0: label must be 0 or 1, got 2"},
		{"ragged group", DefaultConfig(), []int{0, 0}, [][]Outcome{{ok(true), ok(true)}, {ok(true)}}, "turn 1 has 1 chains, turn 0 has 2"},
		{"negative length", DefaultConfig(), []int{0}, [][]Outcome{{{MemoryChars: -1}}}, "negative memory length"},
		{"bad config", bad, []int{0}, [][]Outcome{{ok(true)}}, "gamma must be in [0, 1)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Compute(c.cfg, c.labels, c.outcomes)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want string // "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"agentdojo setting", func(c *Config) { c.Gamma, c.Lambda = 0, 0.5 }, ""},
		{"gamma 1", func(c *Config) { c.Gamma = 1 }, "gamma must be in [0, 1), got 1"},
		{"gamma negative", func(c *Config) { c.Gamma = -0.1 }, "gamma must be in [0, 1), got -0.1"},
		{"gamma NaN", func(c *Config) { c.Gamma = math.NaN() }, "gamma must be in [0, 1), got NaN"},
		{"lambda negative", func(c *Config) { c.Lambda = -1 }, "lambda must be a finite number ≥ 0, got -1"},
		{"format penalty negative", func(c *Config) { c.FormatPenalty = -0.5 }, "format_penalty must be a finite number ≥ 0, got -0.5"},
		{"threshold zero", func(c *Config) { c.LengthThreshold = 0 }, "length_threshold must be > 0, got 0"},
		{"malicious weight zero", func(c *Config) { c.MaliciousWeight = 0 }, "malicious_weight must be a finite number > 0, got 0"},
		{"malicious weight infinite", func(c *Config) { c.MaliciousWeight = math.Inf(1) }, "malicious_weight must be a finite number > 0, got +Inf"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			c.edit(&cfg)
			err := cfg.Validate()
			if c.want == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil || err.Error() != c.want {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestDefaultsMatchDesign(t *testing.T) {
	// docs/design.md#rewards; w₁ = 1 is the paper's reward, without a class weight.
	want := Config{Gamma: 0.5, Lambda: 1.0, FormatPenalty: 0.1, LengthThreshold: 2500, MaliciousWeight: 1}
	if got := DefaultConfig(); got != want {
		t.Fatalf("DefaultConfig() = %+v, want %+v", got, want)
	}
}
