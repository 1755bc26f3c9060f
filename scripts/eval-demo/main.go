// Command eval-demo writes an example `mageguard eval` report from
// synthetic decisions (MAGE with a flat cost per turn, judge-only with a
// cost growing with the turn), to look at the report's tables and plots
// without running a model:
//
//	go run ./scripts/eval-demo DIR
package main

import (
	"fmt"
	"math/rand"
	"os"

	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/rollout/prompt"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: eval-demo DIR")
		os.Exit(2)
	}
	mage, judge := decisions()
	r := eval.Compute(mage, 3)
	opts := eval.ReportOptions{Name: "mage", Baseline: judge, BaselineName: "judge-only", Meta: [][2]string{{"data", "synthetic"}}}
	if err := eval.WriteReport(os.Args[1], mage, r, opts); err != nil {
		fmt.Fprintln(os.Stderr, "eval-demo:", err)
		os.Exit(1)
	}
}

func ptr[T any](v T) *T { return &v }

// decisions draws 120 trajectories over the four suites, two in three of
// them attacks, with a judge that rejects 70% of label-1 turns and 5% of
// the others.
func decisions() (mage, judge []eval.Decision) {
	rng := rand.New(rand.NewSource(1))
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
			d := eval.Decision{TrajectoryID: id, Suite: suites[i%4], AttackType: at, Attack: attack, Utility: ptr(i%5 != 0),
				Turn: k, Label: lab, Decision: dec, JudgeParsed: true, MemoryParsed: ptr(true), MemoryChars: 400,
				GuardTokens: 900 + rng.Intn(200), PrefixTokens: 600}
			mage = append(mage, d)
			d.GuardTokens = 400 + 350*(k+1) + rng.Intn(100)
			d.PrefixTokens = 300
			d.MemoryParsed = nil
			judge = append(judge, d)
		}
	}
	return mage, judge
}
