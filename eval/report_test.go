package eval

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/rollout/prompt"
)

func TestWriteReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	ds := handMade()
	r := Compute(ds, 2)
	// A judge-only baseline: the same runs, each turn costing 10 tokens per turn seen so far.
	base := handMade()
	for i := range base {
		base[i].GuardTokens = 10 * (base[i].Turn + 1)
		base[i].MemoryParsed = nil
	}
	opts := ReportOptions{Title: "test report", Meta: [][2]string{{"model", "m|1"}}, Name: "mage", Baseline: base, BaselineName: "judge-only"}
	if err := WriteReport(dir, ds, r, opts); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got, want := strings.Join(names, " "), "asr_bu_by_horizon.png latency_histogram.png report.json report.md roc.png token_cost_per_task.png"; got != want {
		t.Fatalf("files %q, want %q (no temporary files left)", got, want)
	}
	for _, p := range []string{PlotHorizon, PlotLatency, PlotTokensPerTask} {
		data, _ := os.ReadFile(filepath.Join(dir, p))
		img, err := png.Decode(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if b := img.Bounds(); b.Dx() != 672 || b.Dy() != 432 {
			t.Errorf("%s: %v, want 672×432", p, b)
		}
	}
	want, _ := MarshalReport(r)
	got, _ := os.ReadFile(filepath.Join(dir, ReportJSON))
	if !bytes.Equal(got, want) {
		t.Fatal("report.json differs from MarshalReport")
	}
	md, _ := os.ReadFile(filepath.Join(dir, ReportMarkdown))
	for _, s := range []string{
		"# test report", `- model: m\|1`,
		"> **WARNING: many outputs did not parse**: judge 4.8% of turns", // 1 of 21
		"| `asr` | 40.0% |", "| `detection_latency_mean` | +0.33 |", "| `token_cost_online` | 21.2 |",
		"| `n_skipped` | 2 |", "| `bu_utility` | 50.0% |",
		"## By suite", "| banking | 2 | 2 | 50.0% | 100.0% | 50.0% |",
		"| none | 0 | 3 | — | — | 66.7% |",
		"| 0 | 1 | 3 | 0.0% |", "| -1 | 1 |", "| +2 | 1 |",
		"![ASR and BU by horizon](asr_bu_by_horizon.png)",
	} {
		if !strings.Contains(string(md), s) {
			t.Errorf("report.md lacks %q", s)
		}
	}
	// Horizon rows are in numeric order.
	if i, j := strings.Index(string(md), "| 1 | 2 | 0 |"), strings.Index(string(md), "| 2 | 2 | 0 |"); i < 0 || j < 0 || i > j {
		t.Errorf("horizon rows missing or out of order:\n%s", md)
	}
}

func TestWriteReportEmpty(t *testing.T) {
	dir := t.TempDir()
	if err := WriteReport(dir, nil, Compute(nil, 1), ReportOptions{}); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, ReportMarkdown))
	if !strings.Contains(string(md), "No runs.") || !strings.Contains(string(md), "Format violations: judge — of turns") {
		t.Errorf("empty report.md:\n%s", md)
	}
}

func TestViolationSummary(t *testing.T) {
	never := traj("A", "s", ptr("x"), true, nil, "011", "FFF")
	for i := range never {
		never[i].MemoryParsed = ptr(false)
	}
	cases := []struct {
		name string
		ds   []Decision
		want string
	}{
		{"never parses", never, "**WARNING: the judge's output never parsed** (100.0% of 3 turns)"},
		{"all fine", traj("A", "s", nil, false, nil, "00", "AA"), "Format violations: judge 0.0% of turns, memory 0.0%."},
		{"memory only", func() []Decision {
			ds := traj("A", "s", nil, false, nil, "0000000000", "AAAAAAAAAA")
			ds[3].MemoryParsed = ptr(false) // 10% ≥ 5%
			return ds
		}(), "**WARNING: many outputs did not parse**: judge 0.0% of turns (those decisions are the fallback `reject`), memory 10.0%"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := ViolationSummary(Compute(c.ds, 0).Metrics)
			if !strings.HasPrefix(got, c.want) {
				t.Fatalf("got %q, want prefix %q", got, c.want)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	a := Compute(handMade(), 2)
	votes := traj("A", "s", ptr("x"), true, nil, "01", "AR")
	votes[1].Votes, votes[1].VoteTokens = []string{prompt.DecisionReject, prompt.DecisionReject, prompt.DecisionApprove}, 5
	b := Compute(votes, 0)
	got := Compare([]NamedReport{{"mage", a}, {"votes|3", b}})
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if lines[0] != `| metric | mage | votes\|3 |` || lines[1] != "|---|---:|---:|" {
		t.Fatalf("header:\n%s", got)
	}
	for _, s := range []string{
		"| asr | 40.0% | 0.0% |",
		"| bu | 66.7% | — |",
		"| n_attack | 5 | 1 |",
		"| vote_token_cost_unabridged | — | 5.0 |",
		"| n_skipped | 2 | 0 |",
	} {
		if !strings.Contains(got, s+"\n") {
			t.Errorf("compare lacks %q:\n%s", s, got)
		}
	}
	// Rows follow report.json's order: the vote costs come before n_skipped.
	if strings.Index(got, "vote_token_cost_online") > strings.Index(got, "n_skipped") {
		t.Errorf("row order:\n%s", got)
	}
	if n := len(lines); n != 2+22 {
		t.Errorf("%d lines, want 24 (header, rule, 22 metrics)", n)
	}
}

// ReadReport takes only a mageguard report.json: every key report.json
// always has, no unknown key anywhere.
func TestReadReportIsStrict(t *testing.T) {
	good, err := MarshalReport(Compute(handMade(), 2))
	if err != nil {
		t.Fatal(err)
	}
	// The same report with votes (their keys are optional, not unknown).
	withVotes := handMade()
	for i := range withVotes {
		withVotes[i].Votes = []string{withVotes[i].Decision}
	}
	voted, err := MarshalReport(Compute(withVotes, 0))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(voted, []byte(`"vote_token_cost_online"`)) {
		t.Fatal("the voted report has no vote costs: the case tests nothing")
	}
	cases := []struct {
		name, text, want string // want "" = reads
	}{
		{"a report", string(good), ""},
		{"a report with votes", string(voted), ""},
		{"another JSON object", `{"foo": 1}`, `unknown field "foo"`},
		{"empty object", `{}`, `key "asr" missing`},
		{"a key missing", strings.Replace(string(good), `"n_skipped": 2,`, "", 1), `key "n_skipped" missing`},
		{"an unknown top-level key", strings.Replace(string(good), `"n_skipped": 2,`, `"n_skipped": 2, "extra": 1,`, 1), `unknown field "extra"`},
		{"an unknown key in a breakdown", strings.Replace(string(good), `"by_suite": {`, `"by_suite": {"x": {"asr_typo": 1},`, 1), `unknown field "asr_typo"`},
		{"a wrong type", strings.Replace(string(good), `"n_skipped": 2,`, `"n_skipped": "2",`, 1), `n_skipped`},
		{"two objects", string(good) + "{}", "data after"},
		{"a key given twice", strings.Replace(string(good), `"n_skipped": 2,`, `"n_skipped": 2, "n_skipped": 3,`, 1), "n_skipped: given twice"},
		{"a list", `[1]`, "cannot unmarshal array"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.want != "" && c.text == string(good) {
				t.Fatal("the edit did not apply: the case tests nothing")
			}
			path := filepath.Join(t.TempDir(), ReportJSON)
			if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := ReadReport(path)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case c.want == "":
				back, _ := MarshalReport(r)
				if string(back) != c.text {
					t.Fatalf("round trip differs:\n%s\n---\n%s", back, c.text)
				}
			case err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path):
				t.Fatalf("error %v, want one naming %s and containing %q", err, path, c.want)
			}
		})
	}
}
