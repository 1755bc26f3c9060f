package agentdojo

import (
	"context"
	"path/filepath"
	"testing"
)

// TestSampleAgreesWithReferenceLabels imports the sample of real runs in
// testdata/sample/runs and compares the result with their reference labels
// (testdata/sample/labeled.jsonl; how both were made: its README): the same
// ids, every label and every other field equal, and the sample's one
// sanity run skipped.
func TestSampleAgreesWithReferenceLabels(t *testing.T) {
	_, c, sum, err := CompareWithReference(context.Background(), t, filepath.Join("testdata", "sample"))
	if err != nil {
		t.Fatal(err)
	}
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
