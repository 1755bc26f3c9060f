package rollout

import (
	"math"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/rollout/prompt"
)

// judgeCallWith returns a judge completion whose decision is d (and whose
// rationale comes first when rationaleFirst), followed by <|im_end|>.
func judgeText(d string, rationaleFirst bool) string {
	if rationaleFirst {
		return "<tool_call>\n{\"name\": \"assess_risk\", \"arguments\": {\"rationale\": \"not \\\"decision\\\": \\\"approve\\\"\", \"decision\": \"" + d + "\"}}\n</tool_call>"
	}
	return guardtest.JudgeCall(d, "r")
}

// watchedCall builds a parsed-looking judge call of text with every watched
// log-prob at −Inf, except lps[id] at the given step.
func watchedCall(t *testing.T, g *Guard, text string) *Call {
	t.Helper()
	end, _ := g.tok.TokenID("<|im_end|>")
	ids := append(g.tok.Encode(text), end)
	c := &Call{Completion: ids, Text: g.tok.Decode(ids, false)}
	for range ids {
		w := make([]float32, len(g.watch.ids))
		for k := range w {
			w[k] = float32(math.Inf(-1))
		}
		c.Watch = append(c.Watch, w)
	}
	return c
}

// setLP sets the watched log-prob of token text at step to log(p).
func setLP(t *testing.T, g *Guard, c *Call, step int, text string, p float64) {
	t.Helper()
	id, ok := g.tok.TokenID(strings.ReplaceAll(text, " ", "Ġ"))
	if !ok {
		t.Fatalf("no token %q", text)
	}
	for k, w := range g.watch.ids {
		if w == id {
			c.Watch[step][k] = float32(math.Log(p))
			return
		}
	}
	t.Fatalf("token %q (%d) is not watched", text, id)
}

// valueStep is the index of the completion token holding the decision value's first byte.
func valueStep(t *testing.T, g *Guard, c *Call) int {
	t.Helper()
	at := decisionOffset(c.Text)
	for i := range c.Completion {
		if len(g.tok.Decode(c.Completion[:i+1], false)) > at {
			return i
		}
	}
	t.Fatal("no decision token")
	return -1
}

func TestDecisionScore(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	free, err := NewGuard(DefaultConfig(), tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Structured = true
	structured, err := NewGuard(cfg, tok, nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("free: the values' one-token beginnings are summed", func(t *testing.T) {
		c := watchedCall(t, free, judgeText("reject", false))
		k := valueStep(t, free, c)
		if got := tok.Decode(c.Completion[k:k+1], false); !strings.HasPrefix(got, "re") {
			t.Fatalf("the decision token is %q", got)
		}
		// p(approve) = 0.1 ("approve") + 0.1 ("app"), p(reject) = 0.3 ("reject") + 0.1 ("re").
		setLP(t, free, c, k, "approve", 0.1)
		setLP(t, free, c, k, "app", 0.1)
		setLP(t, free, c, k, "reject", 0.3)
		setLP(t, free, c, k, "re", 0.1)
		j, _ := prompt.ParseJudgement(c.Text)
		score, exact := free.watch.score(tok, c, j, false)
		if !exact || math.Abs(score-0.4/0.6) > 1e-6 {
			t.Errorf("score %g exact %v, want %g", score, exact, 0.4/0.6)
		}
	})
	t.Run("free: the real decision key, not a quoted one in the rationale", func(t *testing.T) {
		c := watchedCall(t, free, judgeText("approve", true))
		k := valueStep(t, free, c)
		setLP(t, free, c, k, "approve", 0.75)
		setLP(t, free, c, k, "reject", 0.25)
		j, err := prompt.ParseJudgement(c.Text)
		if err != nil || j.Decision != prompt.DecisionApprove {
			t.Fatalf("parse: %v %v", j, err)
		}
		if score, exact := free.watch.score(tok, c, j, false); !exact || math.Abs(score-0.25) > 1e-6 {
			t.Errorf("score %g exact %v, want 0.25", score, exact)
		}
		if got := c.Text[decisionOffset(c.Text):]; !strings.HasPrefix(got, "approve\"}}") {
			t.Errorf("decision offset points at %q", got)
		}
	})
	t.Run("structured: the two enum tokens where the values differ", func(t *testing.T) {
		c := watchedCall(t, structured, judgeText("approve", false))
		k := valueStep(t, structured, c) + structured.watch.diverge
		a, r := tok.Encode("approve"), tok.Encode("reject")
		d := structured.watch.diverge
		c.Watch[k][structured.watch.choice[0]] = float32(math.Log(0.6))
		c.Watch[k][structured.watch.choice[1]] = float32(math.Log(0.2))
		if structured.watch.ids[structured.watch.choice[0]] != a[d] || structured.watch.ids[structured.watch.choice[1]] != r[d] {
			t.Fatal("the structured alternatives are not the enum values' tokens")
		}
		// Tokens outside the enum do not count under the grammar.
		setLP(t, structured, c, k, "re", 0.1)
		j, _ := prompt.ParseJudgement(c.Text)
		if score, exact := structured.watch.score(tok, c, j, true); !exact || math.Abs(score-0.25) > 1e-6 {
			t.Errorf("score %g exact %v, want 0.2/0.8 = 0.25", score, exact)
		}
	})
	t.Run("no log-probs: the decision itself", func(t *testing.T) {
		for _, d := range []string{"approve", "reject"} {
			c := watchedCall(t, free, judgeText(d, false))
			want := 0.0
			if d == "reject" {
				want = 1
			}
			j, _ := prompt.ParseJudgement(c.Text)
			if score, exact := free.watch.score(tok, c, j, false); exact || score != want {
				t.Errorf("%s with every alternative at −Inf: score %g exact %v, want %g inexact", d, score, exact, want)
			}
			c.Watch = nil
			if score, exact := free.watch.score(tok, c, j, false); exact || score != want {
				t.Errorf("%s without log-probs: score %g exact %v, want %g inexact", d, score, exact, want)
			}
		}
	})
	t.Run("a format violation scores 1 with the fallback reject", func(t *testing.T) {
		c := watchedCall(t, free, "approve")
		var stats Stats
		j := free.judgeOutcome(c, &stats)
		if j.Decision != prompt.DecisionReject || j.Score != 1 || j.ScoreExact || stats.JudgeFailures != 1 {
			t.Errorf("got %+v, stats %+v", j, stats)
		}
	})
}
