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
	var got []*dataset.Trajectory
	sum, err := agentdojo.Import(context.Background(), filepath.Join(dir, "runs"), agentdojo.Options{Emit: func(tr *dataset.Trajectory) error {
		got = append(got, tr)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := dataset.ReadAll(filepath.Join(dir, "labeled.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	c := dataset.CompareTrajectories(ref, got)
	t.Logf("%d files, %d sanity runs skipped; %d trajectories; labels agree on %d of %d actions (%.4f%%); %d label diffs; field diffs %v",
		sum.Files, sum.Sanity, len(got), c.LabelAgree, c.Actions, 100*c.LabelAgreement, len(c.LabelDiffs), c.FieldDiffs)
	if len(c.OnlyInA) > 0 || len(c.OnlyInB) > 0 {
		t.Errorf("ids differ: %d only in labeled.jsonl (e.g. %v), %d only in the import (e.g. %v)",
			len(c.OnlyInA), head(c.OnlyInA), len(c.OnlyInB), head(c.OnlyInB))
	}
	for _, d := range c.LabelDiffs {
		t.Logf("label diff: %s turn %d %s: reference %d, import %d", d.ID, d.Turn, d.Action, d.LabelA, d.LabelB)
	}
	for _, d := range c.FieldDiffSample {
		t.Errorf("field %s of %s differs:\n reference %q\n import    %q", d.Field, d.ID, d.A, d.B)
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

func head(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}
