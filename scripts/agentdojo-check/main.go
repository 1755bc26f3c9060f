// Command agentdojo-check imports every run of the complete AgentDojo logs
// in DIR (a directory holding runs/ and labeled.jsonl) and compares the
// result with the reference labels: the same ids, at least 99.9% of labels,
// and every other field. It also checks that the bundled
// data/agentdojo-mini is exactly what scripts/make-mini.sh makes from those
// runs (docs/data.md#agentdojo-import-and-labels). The repository carries
// only a sample of the runs, checked by dataset/agentdojo's tests. Run it
// from the repository root:
//
//	go run ./scripts/agentdojo-check DIR
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/agentdojo"
	"github.com/mageguard/mageguard/scripts/internal/check"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: agentdojo-check DIR")
		os.Exit(2)
	}
	check.Main("agentdojo-check", func(t *check.T) { fullAgreement(t, os.Args[1]) })
}

func fullAgreement(t *check.T, dir string) {
	got, c, _, err := agentdojo.CompareWithReference(context.Background(), t, dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.LabelAgreement < 0.999 {
		t.Errorf("label agreement %.4f < 0.999", c.LabelAgreement)
	}

	// The bundled mini data: the flags of scripts/make-mini.sh.
	sub, err := dataset.Subset(got, dataset.SubsetOptions{MaxTurns: 12, MaxObservationChars: 2000,
		AttackPerSuite: 60, BenignPerSuite: 15, PositiveFrac: 0.5, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	train, eval, err := dataset.Split(sub, 0.25, 1)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]*dataset.Trajectory{"train.jsonl": train, "eval.jsonl": eval} {
		have, err := dataset.ReadAll(filepath.Join("data", "agentdojo-mini", name))
		if err != nil {
			t.Fatal(err)
		}
		same := len(have) == len(want)
		for i := 0; same && i < len(have); i++ {
			same = dataset.Equal(have[i], want[i])
		}
		if !same {
			t.Errorf("data/agentdojo-mini/%s is not what scripts/make-mini.sh makes (%d records, want %d): rerun it", name, len(have), len(want))
		}
	}
}
