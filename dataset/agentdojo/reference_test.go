package agentdojo

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mageguard/mageguard/dataset"
)

// TestSampleAgreesWithReferenceLabels imports the sample of real runs in
// testdata/sample/runs and compares the result with their reference labels
// (testdata/sample/labeled.jsonl; how both were made: its README): the same
// ids, every label and every other field equal, and the sample's one
// sanity run skipped.
func TestSampleAgreesWithReferenceLabels(t *testing.T) {
	_, c, sum := importAndCompare(t, filepath.Join("testdata", "sample"))
	if sum.Sanity != 1 || sum.Files != 77 {
		t.Errorf("summary %+v: want 77 files, 1 sanity run", sum)
	}
	if c.Common != 76 || c.Actions == 0 {
		t.Errorf("%d trajectories in common (%d actions), want the sample's 76", c.Common, c.Actions)
	}
	if c.LabelAgree != c.Actions || len(c.LabelDiffs) > 0 {
		t.Errorf("labels agree on %d of %d actions, want all", c.LabelAgree, c.Actions)
	}
	if len(c.FieldDiffs) > 0 {
		t.Errorf("field diffs %v, want none", c.FieldDiffs)
	}
}

// importAndCompare imports dir/runs and compares the result with the
// reference labels dir/labeled.jsonl. Ids on one side only and differing
// fields are test errors; label differences are logged. The complete logs
// are checked the same way by scripts/agentdojo-check.
func importAndCompare(t *testing.T, dir string) ([]*dataset.Trajectory, *dataset.Comparison, *Summary) {
	t.Helper()
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
	for _, d := range c.LabelDiffs {
		t.Logf("label diff: %s turn %d %s: reference %d, import %d", d.ID, d.Turn, d.Action, d.LabelA, d.LabelB)
	}
	for _, d := range c.FieldDiffSample {
		t.Errorf("field %s of %s differs:\n reference %q\n import    %q", d.Field, d.ID, d.A, d.B)
	}
	return got, c, sum
}

func head(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}
