package sweep

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/eval"
)

// TestSpreadOverSeeds: with a third key (seeds), the heatmap metrics —
// here F1 and a synth figure — get a mean and a spread per cell, a heatmap
// of each, a column in summary.csv and summary.md, and a mean ± spread
// table. F1 of point i is 0.1·i, recall at gap >= 3 is 0.5 for every point:
// cell (gamma 0, lambda 1) holds points 0 and 1 (F1 0, 0.1: mean 0.05,
// sd √(2·0.05²) = 0.0707), cell (gamma 0.5, lambda 1) points 2 and 3 (0.25,
// 0.0707); every recall spread is 0.
func TestSpreadOverSeeds(t *testing.T) {
	p, err := NewSchedule(Config{Grid: Grid{
		{"rewards.gamma", []string{"0", "0.5"}},
		{"rewards.lambda", []string{"1"}},
		{"train.seed", []string{"1", "2"}},
	}, Heatmaps: []string{"f1", "recall_gap_ge3"}})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	runner := func(ctx context.Context, pt Point, dir string) error {
		r := eval.Compute(nil, 0)
		f1, rec := 0.1*float64(pt.Index), 0.5
		r.F1 = &f1
		r.Synth = &eval.Synth{RecallGapGE3: &rec}
		data, err := eval.MarshalReport(r)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, eval.ReportJSON), data, 0o644)
	}
	if err := Run(context.Background(), p, out, Options{Runner: runner}); err != nil {
		t.Fatal(err)
	}
	s, err := Collect(out, p)
	if err != nil {
		t.Fatal(err)
	}
	mean, sd, n, _, _, kind := s.cellStats("f1")
	sq := math.Sqrt(2 * 0.05 * 0.05)
	if kind != eval.Rate || n[0][0] != 2 || math.Abs(mean[0][0]-0.05) > 1e-12 || math.Abs(mean[1][0]-0.25) > 1e-12 ||
		math.Abs(sd[0][0]-sq) > 1e-12 || math.Abs(sd[1][0]-sq) > 1e-12 {
		t.Errorf("f1: mean %v sd %v n %v kind %v", mean, sd, n, kind)
	}
	_, sd, _, _, _, _ = s.cellStats("recall_gap_ge3")
	if sd[0][0] != 0 || sd[1][0] != 0 {
		t.Errorf("recall spread %v, want 0", sd)
	}
	for _, f := range []string{HeatmapFile("f1"), SpreadFile("f1"), HeatmapFile("recall_gap_ge3"), SpreadFile("recall_gap_ge3")} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, HeatmapFile("asr"))); err == nil {
		t.Error("heatmap of asr drawn, but not asked for")
	}
	csv := string(mustRead(t, filepath.Join(out, SummaryCSV)))
	if !strings.Contains(strings.SplitN(csv, "\n", 2)[0], ",recall_gap_ge3,") {
		t.Errorf("summary.csv header lacks recall_gap_ge3:\n%s", csv)
	}
	md := string(mustRead(t, filepath.Join(out, SummaryMarkdown)))
	for _, want := range []string{
		"| gamma | lambda | F1 | Recall at gap ≥ 3 |",
		"| 0 | 1 | 5.0% ± 7.1% (2) | 50.0% ± 0.0% (2) |",
		"| 0.5 | 1 | 25.0% ± 7.1% (2) | 50.0% ± 0.0% (2) |",
		"| FPR | tokens/run online | tokens/run all | latency | judge unparsed | memory unparsed | Recall at gap ≥ 3 |",
		"![F1, spread](heatmap_f1_sd.png)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md)
		}
	}
}

// TestHeatmapsMustBeMetrics: sweep.heatmaps names report.json metrics only.
func TestHeatmapsMustBeMetrics(t *testing.T) {
	c := DefaultConfig()
	c.Heatmaps = []string{"f1", "retention_injected_lag_ge2", "recall_gap3"}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `heatmaps: "recall_gap3" is not a metric`) {
		t.Errorf("got %v", err)
	}
}

// TestBestPointsAndEmptyCells: summary.md names no best point among ties
// (at the precision shown), and a heatmap tells a finished point whose
// metric is null ("no value") from a point not run.
func TestBestPointsAndEmptyCells(t *testing.T) {
	p, err := NewSchedule(Config{Grid: Grid{{"rewards.gamma", []string{"0", "0.5"}}, {"rewards.lambda", []string{"0", "2"}}}})
	if err != nil {
		t.Fatal(err)
	}
	s := &Summary{Schedule: p, Reports: make([]*eval.Report, len(p.Points))}
	f := func(v float64) *float64 { return &v }
	for i, asr := range []*float64{f(0.1), f(0.1), nil} { // point 3 not run; point 2 finished, ASR null
		r := eval.Compute(nil, 0)
		r.ASR, r.BU = asr, f(0.5+0.1*float64(i))
		s.Reports[i] = &r
	}
	md := s.bestPoints()
	for _, want := range []string{"- lowest ASR: none; every point with a value (2) ties at 10.0%\n",
		"- highest BU: 70.0% at point 2 (gamma=0.5, lambda=0)\n"} {
		if !strings.Contains(md, want) {
			t.Errorf("best points lack %q:\n%s", want, md)
		}
	}
	if got := s.finishedCells(1, 0, 2, 2); !reflect.DeepEqual(got, [][]int{{1, 1}, {1, 0}}) {
		t.Errorf("finished points per cell %v, want [[1 1] [1 0]]", got)
	}
}
