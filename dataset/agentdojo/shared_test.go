package agentdojo

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/mageguard/mageguard/dataset"
)

// sharedData returns ../shared/data/agentdojo beside the checkout (or
// $MAGEGUARD_SHARED/data/agentdojo), skipping the test when it is absent or
// with -short.
func sharedData(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the full AgentDojo import")
	}
	root := os.Getenv("MAGEGUARD_SHARED")
	if root == "" {
		root = filepath.Join("..", "..", "..", "shared")
	}
	dir := filepath.Join(root, "data", "agentdojo")
	if _, err := os.Stat(filepath.Join(dir, "labeled.jsonl")); err != nil {
		t.Skipf("no %s: skipping the full AgentDojo import", dir)
	}
	return dir
}

// TestSharedAgreement imports every real run and compares the result with
// the reference labels (labeled.jsonl): the same ids, at least 99.9% of
// labels, and every other field. It also checks that the bundled
// data/agentdojo-mini is exactly what scripts/make-mini.sh makes.
func TestSharedAgreement(t *testing.T) {
	dir := sharedData(t)
	var got []*dataset.Trajectory
	sum, err := Import(context.Background(), filepath.Join(dir, "runs"), Options{Emit: func(tr *dataset.Trajectory) error {
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
	if c.LabelAgreement < 0.999 {
		t.Errorf("label agreement %.4f < 0.999", c.LabelAgreement)
	}
	for _, d := range c.LabelDiffs {
		t.Logf("label diff: %s turn %d %s: reference %d, import %d", d.ID, d.Turn, d.Action, d.LabelA, d.LabelB)
	}
	for _, d := range c.FieldDiffSample {
		t.Errorf("field %s of %s differs:\n reference %q\n import    %q", d.Field, d.ID, d.A, d.B)
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
		have, err := dataset.ReadAll(filepath.Join("..", "..", "data", "agentdojo-mini", name))
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
