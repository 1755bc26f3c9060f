package eval

import (
	"math/rand"
	"os"
	"testing"

	"github.com/mageguard/mageguard/rollout/prompt"
)

// TestDemoReport writes an example report from synthetic decisions (MAGE
// with a flat cost per turn, judge-only with a cost growing with the turn)
// into $EVAL_DEMO_OUT, to look at the tables and plots; skipped otherwise.
func TestDemoReport(t *testing.T) {
	out := os.Getenv("EVAL_DEMO_OUT")
	if out == "" {
		t.Skip()
	}
	rng := rand.New(rand.NewSource(1))
	var mage, judge []Decision
	for i := 0; i < 120; i++ {
		id := string(rune('a'+i%26)) + string(rune('a'+i/26))
		attack := i%3 != 0
		suites := []string{"banking", "slack", "travel", "workspace"}
		var at *string
		if attack {
			at = ptr([]string{"important_instructions", "tool_knowledge"}[i%2])
		}
		T := 2 + rng.Intn(10)
		start := rng.Intn(T)
		h := 0
		if attack {
			h = 1 + rng.Intn(3)
		}
		for k := 0; k < T; k++ {
			lab := 0
			if attack && k >= start && k < start+h {
				lab = 1
			}
			dec := prompt.DecisionApprove
			if (lab == 1 && rng.Float64() < 0.7) || rng.Float64() < 0.05 {
				dec = prompt.DecisionReject
			}
			d := Decision{TrajectoryID: id, Suite: suites[i%4], AttackType: at, Attack: attack, Utility: ptr(i%5 != 0),
				Turn: k, Label: lab, Decision: dec, JudgeParsed: true, MemoryParsed: ptr(true), MemoryChars: 400,
				GuardTokens: 900 + rng.Intn(200), PrefixTokens: 600}
			mage = append(mage, d)
			d.GuardTokens = 400 + 350*(k+1) + rng.Intn(100)
			d.PrefixTokens = 300
			d.MemoryParsed = nil
			judge = append(judge, d)
		}
	}
	r := Compute(mage, 3)
	if err := WriteReport(out, mage, r, ReportOptions{Name: "mage", Baseline: judge, BaselineName: "judge-only", Meta: [][2]string{{"data", "synthetic"}}}); err != nil {
		t.Fatal(err)
	}
}
