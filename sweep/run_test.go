package sweep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mageguard/mageguard/eval"
)

// fakeClock advances 10 s at every reading, so each point takes 10 s.
func fakeClock() func() time.Time {
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func() time.Time { clock = clock.Add(10 * time.Second); return clock }
}

// syntheticReport is the report a fake training at (gamma, lambda) gives:
// ASR = gamma, BU = 1 − lambda/4, token cost = 100 + 10·index.
func syntheticReport(pt Point) eval.Report {
	g, _ := strconv.ParseFloat(pt.Values[0], 64)
	l := 0.0
	if len(pt.Values) > 1 {
		l, _ = strconv.ParseFloat(pt.Values[1], 64)
	}
	bu, tok := 1-l/4, 100+10*float64(pt.Index)
	r := eval.Compute(nil, 0)
	r.ASR, r.BU, r.TokenCostOnline = &g, &bu, &tok
	r.NAttack, r.NBenign = 10, 5
	return r
}

// fakeRunner writes report.json for each point; it fails at point failAt
// (−1: never) after writing a partial file, as a killed run would.
func fakeRunner(ran *[]int, failAt int) Runner {
	return func(ctx context.Context, pt Point, dir string) error {
		*ran = append(*ran, pt.Index)
		if pt.Index == failAt {
			os.WriteFile(filepath.Join(dir, "partial"), []byte("x"), 0o644)
			return errors.New("killed")
		}
		data, err := eval.MarshalReport(syntheticReport(pt))
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, eval.ReportJSON), data, 0o644)
	}
}

func schedule2x2(t *testing.T) *Schedule {
	t.Helper()
	p, err := NewSchedule(Config{Grid: Grid{
		{"rewards.gamma", []string{"0", "0.5"}},
		{"rewards.lambda", []string{"0", "2"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunResumesAfterKill(t *testing.T) {
	clock := fakeClock()
	p := schedule2x2(t)
	out := t.TempDir()
	var ran []int
	var log bytes.Buffer
	err := Run(context.Background(), p, out, Options{Runner: fakeRunner(&ran, 2), Progress: &log, Now: clock})
	if err == nil || !strings.Contains(err.Error(), "point 2 (gamma=0.5,lambda=0): killed") {
		t.Fatalf("first run: %v", err)
	}
	if fmt.Sprint(ran) != "[0 1 2]" || !Done(filepath.Join(out, "gamma=0,lambda=2")) || Done(filepath.Join(out, "gamma=0.5,lambda=0")) {
		t.Fatalf("ran %v; done flags wrong", ran)
	}
	if _, err := os.Stat(filepath.Join(out, SummaryCSV)); err == nil {
		t.Fatal("summary written by a failed sweep")
	}
	for _, s := range []string{
		"sweep: 4 points over rewards.gamma × rewards.lambda, 0 already finished, 4 to run\n",
		"sweep: point 0 (of 0..3) gamma=0,lambda=0: running (gamma=0, lambda=0)\n",
		"sweep: point 0 (of 0..3) gamma=0,lambda=0: done in 10s; 3 left, ETA 30s\n",
		"sweep: point 1 (of 0..3) gamma=0,lambda=2: done in 10s; 2 left, ETA 20s\n",
	} {
		if !strings.Contains(log.String(), s) {
			t.Errorf("progress lacks %q:\n%s", s, log.String())
		}
	}

	// Resume: only points 2 and 3 run; point 2's folder keeps what the killed run left.
	ran, log = nil, bytes.Buffer{}
	if err := Run(context.Background(), p, out, Options{Runner: fakeRunner(&ran, -1), Progress: &log, Now: clock}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ran) != "[2 3]" {
		t.Fatalf("resumed run ran %v, want [2 3]", ran)
	}
	if _, err := os.Stat(filepath.Join(out, "gamma=0.5,lambda=0", "partial")); err != nil {
		t.Errorf("the point folder was cleared: %v", err)
	}
	for _, s := range []string{
		"2 already finished, 2 to run\n",
		"sweep: point 2 (of 0..3) gamma=0.5,lambda=0: done in 10s; 1 left, ETA 10s\n", // mean of the earlier 10 s points
		"sweep: point 3 (of 0..3) gamma=0.5,lambda=2: done in 10s; all finished\n",
		"summary.csv",
	} {
		if !strings.Contains(log.String(), s) {
			t.Errorf("progress lacks %q:\n%s", s, log.String())
		}
	}
	csv, _ := os.ReadFile(filepath.Join(out, SummaryCSV))
	lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "point,dir,rewards.gamma,rewards.lambda,asr,asr_no_guard,bu,") {
		t.Fatalf("summary.csv:\n%s", csv)
	}
	// Row 3: ASR = gamma = 0.5, BU = 1 − 2/4 = 0.5, tokens = 100 + 30.
	if !strings.HasPrefix(lines[4], "3,\"gamma=0.5,lambda=2\",0.5,2,0.5,,0.5,,") {
		t.Errorf("row 3: %s", lines[4])
	}
	if !strings.Contains(lines[4], ",130,") {
		t.Errorf("row 3 lacks token cost 130: %s", lines[4])
	}
	// A third run has nothing to do.
	ran = nil
	if err := Run(context.Background(), p, out, Options{Runner: fakeRunner(&ran, -1), Now: clock}); err != nil || len(ran) != 0 {
		t.Fatalf("third run ran %v, %v", ran, err)
	}
}

// TestPlanPointCollectMatchesRun: running every point with --point (in
// another order) and then --collect gives the same summary as a full run.
func TestPlanPointCollectMatchesRun(t *testing.T) {
	clock := fakeClock()
	p := schedule2x2(t)
	full, split := t.TempDir(), t.TempDir()
	var ran []int
	if err := Run(context.Background(), p, full, Options{Runner: fakeRunner(&ran, -1), Now: clock}); err != nil {
		t.Fatal(err)
	}
	if err := WriteSchedule(split, p, split, []string{"mageguard", "sweep"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{3, 1, 0, 2, 1} { // point 1 twice: a scheduler's retry is a no-op
		if err := RunPoint(context.Background(), p, split, n, Options{Runner: fakeRunner(&ran, -1), Now: clock}); err != nil {
			t.Fatal(err)
		}
	}
	if len(ran) != 8 {
		t.Errorf("ran %v: the retried point ran again", ran)
	}
	s, err := Collect(split, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Missing()) != 0 {
		t.Errorf("missing %v", s.Missing())
	}
	for _, f := range []string{SummaryCSV, SummaryMarkdown, HeatmapFile("asr"), HeatmapFile("bu"), HeatmapFile("token_cost_online")} {
		a, err1 := os.ReadFile(filepath.Join(full, f))
		b, err2 := os.ReadFile(filepath.Join(split, f))
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between a full run and plan/point/collect (%v, %v)", f, err1, err2)
		}
	}
	md, _ := os.ReadFile(filepath.Join(full, SummaryMarkdown))
	for _, s := range []string{
		"4 points over `rewards.gamma` × `rewards.lambda` (the first key varies slowest); 4 finished.",
		"| point | gamma | lambda | ASR | BU |",
		"| 1 | 0 | 2 | 0.0% | 50.0% |",
		"- lowest ASR: none; 2 points tie at 0.0% (points 0, 1)", // a tie names no best point
		"- fewest guard tokens per run (online): 100.0 at point 0",
		"![ASR](heatmap_asr.png)",
	} {
		if !strings.Contains(string(md), s) {
			t.Errorf("summary.md lacks %q:\n%s", s, md)
		}
	}
	img, err := png.Decode(bytes.NewReader(mustRead(t, filepath.Join(full, HeatmapFile("asr")))))
	if err != nil || img.Bounds().Dx() != 672 {
		t.Errorf("heatmap: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCollectPartial(t *testing.T) {
	p := schedule2x2(t)
	out := t.TempDir()
	var ran []int
	for _, n := range []int{0, 3} {
		if err := RunPoint(context.Background(), p, out, n, Options{Runner: fakeRunner(&ran, -1)}); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Collect(out, p)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(s.Missing()) != "[1 2]" {
		t.Errorf("missing %v", s.Missing())
	}
	csv := string(mustRead(t, filepath.Join(out, SummaryCSV)))
	if !strings.Contains(csv, "\n1,\"gamma=0,lambda=2\",0,2,,,,,") {
		t.Errorf("an unfinished point's row should have empty metrics:\n%s", csv)
	}
	md := string(mustRead(t, filepath.Join(out, SummaryMarkdown)))
	if !strings.Contains(md, "2 finished, **2 not finished**: 1 (`gamma=0,lambda=2`), 2 (`gamma=0.5,lambda=0`).") {
		t.Errorf("summary.md:\n%s", md)
	}
	// A DONE left by other overrides (a renamed key with the same short name) is not reused.
	other, _ := NewSchedule(Config{Grid: Grid{{"grpo.gamma", []string{"0", "0.5"}}, {"rewards.lambda", []string{"0", "2"}}}})
	if err := Run(context.Background(), other, out, Options{Runner: fakeRunner(&ran, -1)}); err == nil ||
		!strings.Contains(err.Error(), "holds a run with overrides [rewards.gamma=0 rewards.lambda=0], not [grpo.gamma=0 rewards.lambda=0]") {
		t.Errorf("reused another schedule's point: %v", err)
	}
	// A point marked done without report.json is an error naming it.
	os.Remove(filepath.Join(out, "gamma=0,lambda=0", eval.ReportJSON))
	if _, err := Collect(out, p); err == nil || !strings.Contains(err.Error(), "point 0 (gamma=0,lambda=0) is marked done but") {
		t.Errorf("got %v", err)
	}
}

func TestRunErrors(t *testing.T) {
	p := schedule2x2(t)
	var ran []int
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Run(ctx, p, t.TempDir(), Options{Runner: fakeRunner(&ran, -1)}); err == nil || !strings.Contains(err.Error(), "stopped before point 0") {
		t.Errorf("cancelled: %v", err)
	}
	if err := RunPoint(context.Background(), p, t.TempDir(), 4, Options{Runner: fakeRunner(&ran, -1)}); err == nil || !strings.Contains(err.Error(), "no point 4") {
		t.Errorf("point 4: %v", err)
	}
	if len(ran) != 0 {
		t.Errorf("ran %v", ran)
	}
}

// TestHeatmapCells: one key gives one row; three keys average over the third.
func TestHeatmapCells(t *testing.T) {
	p1, _ := NewSchedule(Config{Grid: Grid{{"rewards.gamma", []string{"0.25", "0.75"}}}})
	s1 := &Summary{Schedule: p1, Reports: []*eval.Report{ptrTo(syntheticReport(p1.Points[0])), nil}}
	z, col, row, kind := s1.cells("asr")
	if len(z) != 1 || len(z[0]) != 2 || z[0][0] != 0.25 || !math.IsNaN(z[0][1]) || col != 0 || row != -1 || kind != eval.Rate {
		t.Errorf("one key: z %v col %d row %d", z, col, row)
	}

	// gamma × lambda × seed: the token cost 100 + 10·index averages over the seed's two points.
	p3, _ := NewSchedule(Config{Grid: Grid{
		{"rewards.gamma", []string{"0", "0.5"}},
		{"rewards.lambda", []string{"1"}},
		{"train.seed", []string{"1", "2"}},
	}})
	s3 := &Summary{Schedule: p3, Reports: make([]*eval.Report, 4)}
	for i, pt := range p3.Points {
		if i != 3 { // point 3 (gamma 0.5, seed 2) not finished
			s3.Reports[i] = ptrTo(syntheticReport(pt))
		}
	}
	z, col, row, kind = s3.cells("token_cost_online")
	// Rows: gamma 0 → points 0, 1 (tokens 100, 110); gamma 0.5 → point 2 (120) only.
	if len(z) != 2 || len(z[0]) != 1 || z[0][0] != 105 || z[1][0] != 120 || col != 1 || row != 0 || kind != eval.Tokens {
		t.Errorf("three keys: z %v col %d row %d kind %v", z, col, row, kind)
	}
	if _, err := s3.heatmap("token_cost_online", "tokens", false); err != nil {
		t.Error(err)
	}
	md := s3.Markdown()
	if !strings.Contains(md, "each cell is the mean over the other keys (`train.seed`)") {
		t.Errorf("summary.md:\n%s", md)
	}
	// Nothing finished: heatmaps still render (all grey).
	empty := &Summary{Schedule: p3, Reports: make([]*eval.Report, 4)}
	if _, err := empty.heatmap("asr", "ASR", false); err != nil {
		t.Error(err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// A finished point is reused only with the configuration it ran with: a
// DONE whose configuration hash differs from the point's (the base config
// or the global overrides changed, the grid did not) is refused by Run,
// RunPoint and Collect, and so is a DONE without a hash.
func TestFinishedPointNeedsSameConfig(t *testing.T) {
	withHashes := func(salt string) *Schedule {
		p := schedule2x2(t)
		for i := range p.Points {
			p.Points[i].ConfigHash = ConfigHash([]byte(salt + p.Points[i].Name))
		}
		return p
	}
	out := t.TempDir()
	var ran []int
	if err := Run(context.Background(), withHashes("a"), out, Options{Runner: fakeRunner(&ran, -1)}); err != nil {
		t.Fatal(err)
	}
	done := string(mustRead(t, filepath.Join(out, "gamma=0,lambda=0", DoneFile)))
	if want := ConfigHash([]byte("agamma=0,lambda=0")); !strings.Contains(done, `"config_sha256": "`+want+`"`) {
		t.Fatalf("DONE lacks the point's hash %s:\n%s", want, done)
	}
	// The same configuration: nothing runs again.
	ran = nil
	if err := Run(context.Background(), withHashes("a"), out, Options{Runner: fakeRunner(&ran, -1)}); err != nil || len(ran) != 0 {
		t.Fatalf("same config: ran %v, %v", ran, err)
	}
	// Another configuration with the same grid: every way in refuses it.
	changed := withHashes("b")
	want := "sweep: point 0: " + filepath.Join(out, "gamma=0,lambda=0") + " was run with another configuration than this one"
	_, collectErr := Collect(out, changed)
	for name, err := range map[string]error{
		"Run":      Run(context.Background(), changed, out, Options{Runner: fakeRunner(&ran, -1)}),
		"RunPoint": RunPoint(context.Background(), changed, out, 0, Options{Runner: fakeRunner(&ran, -1)}),
		"Collect":  collectErr,
	} {
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "use another output folder") {
			t.Errorf("%s: error %v, want one containing %q", name, err, want)
		}
	}
	if len(ran) != 0 {
		t.Errorf("ran %v with another configuration", ran)
	}
	// A DONE without a hash (an older mageguard) cannot be vouched for.
	old := filepath.Join(t.TempDir(), "old")
	if err := RunPoint(context.Background(), schedule2x2(t), old, 0, Options{Runner: fakeRunner(&ran, -1)}); err != nil {
		t.Fatal(err)
	}
	if err := RunPoint(context.Background(), withHashes("a"), old, 0, Options{Runner: fakeRunner(&ran, -1)}); err == nil ||
		!strings.Contains(err.Error(), "records no configuration hash") {
		t.Errorf("a DONE without a hash: %v", err)
	}
}
