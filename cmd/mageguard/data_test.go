package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run executes mageguard with args and returns stdout, stderr and the error.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newRootCmd()
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errb.String(), err
}

const runs = "../../dataset/agentdojo/testdata/runs"

func TestDataImportStatsValidateSplit(t *testing.T) {
	dir := t.TempDir()
	pq := filepath.Join(dir, "all.parquet")
	out, errs, err := run(t, "data", "import", "agentdojo", "--runs", runs, "--out", pq)
	if err != nil {
		t.Fatal(err)
	}
	if out != "" {
		t.Errorf("import wrote to stdout: %q", out)
	}
	if !strings.Contains(errs, "21 trajectories") || !strings.Contains(errs, "skipped 1 sanity runs") {
		t.Errorf("import summary: %s", errs)
	}

	out, _, err = run(t, "data", "stats", "--json", pq)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("stats --json is not one JSON object: %v\n%s", err, out)
	}
	if s["trajectories"].(float64) != 21 || s["benign"].(float64) != 1 {
		t.Errorf("stats: %v", s)
	}

	out, _, err = run(t, "data", "stats", pq)
	if err != nil || !strings.Contains(out, "turns per trajectory:") || !strings.Contains(out, "workspace") {
		t.Errorf("stats text: %v\n%s", err, out)
	}

	out, _, err = run(t, "data", "validate", pq)
	if err != nil || strings.Count(out, "\n") != 1 || !strings.Contains(out, "ok: 21 trajectories") {
		t.Errorf("validate: %v %q", err, out)
	}

	// the hand-made runs have one benign run: split the bundled data instead.
	mini := "../../data/agentdojo-mini/train.jsonl"
	tr, ev := filepath.Join(dir, "tr.jsonl"), filepath.Join(dir, "ev.parquet")
	_, errs, err = run(t, "data", "split", mini, "--eval-frac", "0.3", "--seed", "5", "--train-out", tr, "--eval-out", ev)
	if err != nil {
		t.Fatalf("split: %v %s", err, errs)
	}
	a, _, _ := run(t, "data", "validate", tr, ev)
	_, _, err = run(t, "data", "split", mini, "--eval-frac", "0.3", "--seed", "5", "--train-out", tr+"2.jsonl", "--eval-out", ev+"2.parquet")
	if err != nil {
		t.Fatal(err)
	}
	x, _ := os.ReadFile(tr)
	y, _ := os.ReadFile(tr + "2.jsonl")
	if !bytes.Equal(x, y) {
		t.Error("split not deterministic")
	}
	if !strings.Contains(a, "tr.jsonl: ok") || !strings.Contains(a, "ev.parquet: ok") {
		t.Errorf("validate: %s", a)
	}

	out, _, err = run(t, "data", "compare", pq, pq)
	if err != nil || !strings.Contains(out, "(100.0000%)") {
		t.Errorf("compare: %v\n%s", err, out)
	}
}

// Bad input: a non-zero exit, an error naming file, line and field, and no
// output file.
func TestDataBadInputLeavesNoOutput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	good, err := os.ReadFile("../../dataset/testdata/sample.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(good), "\n")
	lines[1] = strings.Replace(lines[1], `"label": 0`, `"label": 7`, 1)
	os.WriteFile(bad, []byte(strings.Join(lines, "\n")), 0o644)

	tr, ev := filepath.Join(dir, "tr.jsonl"), filepath.Join(dir, "ev.jsonl")
	for _, args := range [][]string{
		{"data", "validate", bad},
		{"data", "stats", bad},
		{"data", "split", bad, "--train-out", tr, "--eval-out", ev},
		{"data", "subset", bad, "--out", tr},
	} {
		_, _, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), bad+":2: field turns[0].label: must be 0 or 1, got 7") {
			t.Errorf("%v: error %v", args, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left behind: %v", entries)
	}

	// An import that fails half-way leaves no output either.
	runsDir := filepath.Join(dir, "runs", "m", "banking", "user_task_0", "none")
	os.MkdirAll(runsDir, 0o755)
	os.WriteFile(filepath.Join(runsDir, "none.json"), []byte(`{"suite_name": "banking", "user_task_id": "user_task_0", "messages": [{"role": "user", "content": "hi"}]}`), 0o644)
	os.WriteFile(filepath.Join(runsDir, "zzz.json"), []byte(`{"suite_name": "banking"`), 0o644)
	out := filepath.Join(dir, "o.parquet")
	_, _, err = run(t, "data", "import", "agentdojo", "--runs", filepath.Join(dir, "runs"), "--out", out)
	if err == nil || !strings.Contains(err.Error(), "zzz.json") {
		t.Errorf("import error %v", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("failed import left its output")
	}
	_, _, err = run(t, "data", "import", "agentdojo", "--runs", filepath.Join(dir, "runs"), "--out", out, "--rules", filepath.Join(dir, "nope.yaml"))
	if err == nil {
		t.Error("missing rules file accepted")
	}
}
