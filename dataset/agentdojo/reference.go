package agentdojo

import (
	"context"
	"path/filepath"

	"github.com/mageguard/mageguard/dataset"
)

// Reporter is what CompareWithReference reports to; a *testing.T and a
// scripts/internal/check T both are one.
type Reporter interface {
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
}

// CompareWithReference imports dir/runs and compares the result with the
// reference labels dir/labeled.jsonl (docs/data.md#agentdojo-import-and-labels).
// It logs a summary and every label difference to r, and reports ids on
// one side only and differing fields as errors; how many labels must agree
// is the caller's to check. It returns the imported trajectories, the
// comparison and the import's summary; an error when the runs could not be
// imported or the reference read. TestSampleAgreesWithReferenceLabels
// checks the sample of testdata/sample with it, scripts/agentdojo-check
// the complete logs.
func CompareWithReference(ctx context.Context, r Reporter, dir string) ([]*dataset.Trajectory, *dataset.Comparison, *Summary, error) {
	var got []*dataset.Trajectory
	sum, err := Import(ctx, filepath.Join(dir, "runs"), Options{Emit: func(tr *dataset.Trajectory) error {
		got = append(got, tr)
		return nil
	}})
	if err != nil {
		return nil, nil, nil, err
	}
	ref, err := dataset.ReadAll(filepath.Join(dir, "labeled.jsonl"))
	if err != nil {
		return nil, nil, nil, err
	}
	c := dataset.CompareTrajectories(ref, got)
	r.Logf("%d files, %d sanity runs skipped; %d trajectories; labels agree on %d of %d actions (%.4f%%); %d label diffs; field diffs %v",
		sum.Files, sum.Sanity, len(got), c.LabelAgree, c.Actions, 100*c.LabelAgreement, len(c.LabelDiffs), c.FieldDiffs)
	if len(c.OnlyInA) > 0 || len(c.OnlyInB) > 0 {
		r.Errorf("ids differ: %d only in labeled.jsonl (e.g. %v), %d only in the import (e.g. %v)",
			len(c.OnlyInA), firstFive(c.OnlyInA), len(c.OnlyInB), firstFive(c.OnlyInB))
	}
	for _, d := range c.LabelDiffs {
		r.Logf("label diff: %s turn %d %s: reference %d, import %d", d.ID, d.Turn, d.Action, d.LabelA, d.LabelB)
	}
	for _, d := range c.FieldDiffSample {
		r.Errorf("field %s of %s differs:\n reference %q\n import    %q", d.Field, d.ID, d.A, d.B)
	}
	return got, c, sum, nil
}

// firstFive is s, or its first five elements when it has more.
func firstFive(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}
