package localgen

import (
	"math"
	"slices"
	"testing"

	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
)

// structuredGuard returns a tiny random model and a guard with structured
// decoding (budgets of 32 and 40 tokens) whose calls it runs; it skips
// the test in -short mode.
func structuredGuard(t *testing.T) (*rollout.Guard, *model.Model) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs a model")
	}
	tok := guardtest.Tokenizer(t)
	m := guardtest.TinyModel(t, 32, 64, 16, 7)
	cfg := rollout.DefaultConfig()
	cfg.Structured = true
	cfg.MaxMemoryTokens, cfg.MaxJudgeTokens = 32, 40
	g, err := rollout.NewGuard(cfg, tok, &Generator{Model: m})
	if err != nil {
		t.Fatal(err)
	}
	return g, m
}

func TestGeneratorStructured(t *testing.T) {
	g, _ := structuredGuard(t)
	ep := []*rollout.Episode{{Traj: guardtest.BankTrajectory(), Start: 1, End: 2}}
	run := func(seed uint64) []*rollout.Chain {
		chains, stats, err := g.Run(ep, rollout.RunOptions{Chains: 2, Sampling: generate.Sampling{Temperature: 1, TopP: 1, Seed: seed}})
		if err != nil {
			t.Fatal(err)
		}
		// A random model under structured decoding always yields valid calls.
		if stats.MemoryFailures != 0 || stats.JudgeFailures != 0 {
			t.Fatalf("format violations under structured decoding: %+v", stats)
		}
		return chains
	}
	a, b := run(11), run(11)
	for i := range a {
		for k := range a[i].Turns {
			ta, tb := a[i].Turns[k], b[i].Turns[k]
			if ta.Judge.Text != tb.Judge.Text || ta.MemoryOut != tb.MemoryOut {
				t.Fatal("the same seed gave different completions")
			}
			c := ta.Judge
			if len(c.Forced) != len(c.Completion) || len(c.LogProbs) != len(c.Completion) {
				t.Fatalf("forced %d / logprobs %d / tokens %d", len(c.Forced), len(c.LogProbs), len(c.Completion))
			}
			// The decision is the model's choice; the fixed JSON around it is forced.
			free := 0
			for _, f := range c.Forced {
				if !f {
					free++
				}
			}
			if free == 0 || c.Forced[0] != true {
				t.Fatalf("forced flags %v", c.Forced)
			}
			// Replaying the tokens through the grammar (what a server's completion gets)
			// marks the same tokens forced; a token off the grammar's path is refused.
			replay, err := g.Grammar(rollout.JudgeRole).Forced(c.Completion, 40)
			if err != nil || !slices.Equal(replay, c.Forced) {
				t.Fatalf("grammar.Forced %v (%v), the generator's %v", replay, err, c.Forced)
			}
			off := slices.Clone(c.Completion)
			off[0]++
			if _, err := g.Grammar(rollout.JudgeRole).Forced(off, 40); err == nil {
				t.Fatal("grammar.Forced accepted a token the grammar forbids")
			}
			for _, lp := range c.LogProbs {
				if lp > 0 {
					t.Fatalf("log-prob %v > 0", lp)
				}
			}
		}
	}
}

// TestPrefilledOpeningEqualsDecodingIt: prefilling the tokens a grammar
// forces before its first choice gives the completions, forced flags and
// log-probs of the choices that decoding them one step each gives; the
// prefilled tokens report log-prob 0 and, when watched, −Inf.
func TestPrefilledOpeningEqualsDecodingIt(t *testing.T) {
	g, m := structuredGuard(t)
	ec := g.EpisodeCalls(&rollout.Episode{Traj: guardtest.BankTrajectory(), Start: 0, End: 2}, nil)
	var reqs []generate.Request
	for turn := range 2 {
		reqs = append(reqs, g.Request(ec.Memory(turn, "m"), rollout.MemoryRole), g.Request(ec.Judge(turn, "m"), rollout.JudgeRole))
	}
	for _, s := range []generate.Sampling{{Greedy: true, Temperature: 1, TopP: 1}, {Temperature: 1, TopP: 1, Seed: 5}} {
		fast, err := (&Generator{Model: m}).Generate(reqs, s)
		if err != nil {
			t.Fatal(err)
		}
		slow, err := (&Generator{Model: m, stepByStep: true}).Generate(reqs, s)
		if err != nil {
			t.Fatal(err)
		}
		for i := range reqs {
			f, w := fast[i], slow[i]
			if !slices.Equal(f.Tokens, w.Tokens) || !slices.Equal(f.Forced, w.Forced) {
				t.Fatalf("request %d (%+v): prefilled %v, decoded %v", i, s, f.Tokens, w.Tokens)
			}
			lead := 0
			for lead < len(w.Forced) && w.Forced[lead] {
				lead++
			}
			if lead == 0 || lead == len(w.Tokens) {
				t.Fatalf("request %d: %d leading forced tokens of %d", i, lead, len(w.Tokens))
			}
			for k := range f.Tokens {
				want := float64(w.LogProbs[k])
				if k < lead {
					want = 0
				}
				if math.Abs(float64(f.LogProbs[k])-want) > 1e-4 {
					t.Errorf("request %d token %d: log-prob %g, want %g", i, k, f.LogProbs[k], want)
				}
			}
			if len(reqs[i].Watch) == 0 {
				continue
			}
			if len(f.Watch) != len(f.Tokens) {
				t.Fatalf("request %d: %d watched steps for %d tokens", i, len(f.Watch), len(f.Tokens))
			}
			for k := range f.Watch {
				for j := range f.Watch[k] {
					got, want := float64(f.Watch[k][j]), float64(w.Watch[k][j])
					if k < lead && !math.IsInf(got, -1) || k >= lead && math.Abs(got-want) > 1e-4 {
						t.Errorf("request %d token %d: watched log-prob %g, decoded %g", i, k, got, want)
					}
				}
			}
		}
	}
}

// TestKeptPrefixStepEqualsWithout runs a lone session's first two guard
// steps (rollout.Guard.Step, as serve and mcp do) with each role's system
// prompt kept in the model across calls and with every prompt prefilled
// whole (NoKeptPrefix), greedy and sampled: the same completions, forced
// flags, decisions and scores, and log-probs within 1e-5; the kept path
// reused a prefix at the second step.
func TestKeptPrefixStepEqualsWithout(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a model")
	}
	tok := guardtest.Tokenizer(t)
	m := guardtest.TinyModel(t, 32, 64, 16, 7)
	cfg := rollout.DefaultConfig()
	cfg.Structured = true
	cfg.MaxMemoryTokens, cfg.MaxJudgeTokens = 32, 40
	tr := guardtest.BankTrajectory()
	steps := func(gen *Generator, s generate.Sampling) []rollout.Turn {
		g, err := rollout.NewGuard(cfg, tok, gen)
		if err != nil {
			t.Fatal(err)
		}
		first := rollout.StepInput{UserPrompt: tr.UserPrompt, First: true, Action: tr.Turns[0].Action}
		a, _, err := g.Step([]rollout.StepInput{first}, s)
		if err != nil {
			t.Fatal(err)
		}
		second := rollout.StepInput{UserPrompt: tr.UserPrompt, Memory: a[0].MemoryOut, Previous: &tr.Turns[0].Action,
			Observation: tr.Turns[0].Observation, Action: tr.Turns[1].Action}
		b, _, err := g.Step([]rollout.StepInput{second}, s)
		if err != nil {
			t.Fatal(err)
		}
		return append(a, b...)
	}
	for _, s := range []generate.Sampling{{Greedy: true, Temperature: 1, TopP: 1}, {Temperature: 1, TopP: 1, Seed: 5}} {
		m.DropKeptPrefixes()
		hits, _ := m.PrefixCacheStats()
		kept := steps(&Generator{Model: m}, s)
		if h, _ := m.PrefixCacheStats(); h < hits+2 {
			t.Fatalf("%+v: %d kept prefixes reused in two steps, want 2 (memory, judge)", s, h-hits)
		}
		whole := steps(&Generator{Model: m, NoKeptPrefix: true}, s)
		if h, _ := m.PrefixCacheStats(); h < hits+2 {
			t.Fatal("NoKeptPrefix reused a kept prefix")
		}
		worst := 0.0
		for i := range kept {
			k, w := kept[i], whole[i]
			if k.Decision != w.Decision || k.Score != w.Score || k.MemoryOut != w.MemoryOut {
				t.Fatalf("%+v step %d: decision %s score %g memory %q kept, %s %g %q whole", s, i, k.Decision, k.Score, k.MemoryOut, w.Decision, w.Score, w.MemoryOut)
			}
			for _, c := range [][2]*rollout.Call{{k.Memory, w.Memory}, {&k.Judge, &w.Judge}} {
				if c[0].Prefill <= 0 || c[0].Prefill > c[0].Time {
					t.Fatalf("step %d: a call's prefill %v of its %v", i, c[0].Prefill, c[0].Time)
				}
				if !slices.Equal(c[0].Completion, c[1].Completion) || !slices.Equal(c[0].Forced, c[1].Forced) {
					t.Fatalf("%+v step %d: %q kept, %q whole", s, i, c[0].Text, c[1].Text)
				}
				for j := range c[0].LogProbs {
					worst = math.Max(worst, math.Abs(float64(c[0].LogProbs[j]-c[1].LogProbs[j])))
				}
			}
		}
		if worst > 1e-5 {
			t.Errorf("%+v: max |kept − whole| log-prob %g > 1e-5", s, worst)
		}
		t.Logf("%+v: max |kept − whole| log-prob %.3g", s, worst)
	}
}
