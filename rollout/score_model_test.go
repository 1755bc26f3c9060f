package rollout

import (
	"math"
	"testing"

	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/localgen"
	"github.com/mageguard/mageguard/rollout/prompt"
)

// TestLocalGeneratorScoresStructuredDecisions runs the judge of a random
// model under structured decoding: every judge call parses, so every score
// is read from the watched log-probs at the enum choice, and it must be the
// two alternatives' probabilities renormalised — which for a sampled
// decision also bounds it away from 0 and 1 — and the same score Step reads.
func TestLocalGeneratorScoresStructuredDecisions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a model")
	}
	tok := guardtest.Tokenizer(t)
	cfg := DefaultConfig()
	cfg.Structured = true
	cfg.MaxMemoryTokens, cfg.MaxJudgeTokens = 32, 40
	g, err := NewGuard(cfg, tok, &localgen.Generator{Model: guardtest.TinyModel(t, 32, 64, 16, 7)})
	if err != nil {
		t.Fatal(err)
	}
	tr := guardtest.BankTrajectory()
	turns, _, err := g.Step([]StepInput{
		{UserPrompt: tr.UserPrompt, First: true, Action: tr.Turns[0].Action},
		{UserPrompt: tr.UserPrompt, First: true, Action: tr.Turns[1].Action},
	}, generate.Sampling{Greedy: true, Temperature: 1, TopP: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, tu := range turns {
		c := tu.Judge
		if !c.Parsed || !tu.ScoreExact {
			t.Fatalf("session %d: parsed %v, exact score %v", i, c.Parsed, tu.ScoreExact)
		}
		if len(c.Watch) != len(c.Completion) {
			t.Fatalf("session %d: %d watched steps for %d tokens", i, len(c.Watch), len(c.Completion))
		}
		// At the choice, the decision greedily taken is the likelier one.
		k := -1
		at := decisionOffset(c.Text)
		for s := range c.Completion {
			if len(tok.Decode(c.Completion[:s+1], false)) > at {
				k = s + g.watch.diverge
				break
			}
		}
		la, lr := float64(c.Watch[k][g.watch.choice[0]]), float64(c.Watch[k][g.watch.choice[1]])
		want := math.Exp(lr) / (math.Exp(la) + math.Exp(lr))
		if math.Abs(tu.Score-want) > 1e-9 {
			t.Errorf("session %d: score %g, want %g", i, tu.Score, want)
		}
		if (tu.Decision == prompt.DecisionReject) != (lr > la) {
			t.Errorf("session %d: greedy decision %s with log-probs approve %g reject %g", i, tu.Decision, la, lr)
		}
		// The watched log-prob of each emitted token is its own log-prob.
		for s, id := range c.Completion {
			for j, w := range g.watch.ids {
				if w == id && math.Abs(float64(c.Watch[s][j]-c.LogProbs[s])) > 1e-6 {
					t.Errorf("session %d step %d: watched %g, log-prob %g", i, s, c.Watch[s][j], c.LogProbs[s])
				}
			}
		}
	}
}
