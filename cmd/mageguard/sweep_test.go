package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/sweep"
)

// microSweep is a sweep config of two tiny points (rewards.gamma ∈ {0, 0.5}):
// a one-layer 8-wide Qwen3 trained one step on two one-turn windows with two
// chains, then evaluated on one trajectory of one turn. Two new tokens per
// call keep it fast; nothing parses, which a plumbing test does not mind.
const microSweep = `
model:
  tokenizer: ../../assets/qwen3
  hidden_size: 8
  intermediate_size: 16
  num_hidden_layers: 1
  num_attention_heads: 1
  num_key_value_heads: 1
  head_dim: 8
  seed: 3
rollout:
  group_size: 2
  max_memory_tokens: 2
  max_judge_tokens: 2
  max_observation_tokens: 64
train:
  data: ../../train/testdata/micro.jsonl
  steps: 1
  trajectories: 2
  max_turns: 1
  save_every: 0
  keep_last: 0
grpo:
  warmup_steps: 0
  beta: 0
sweep:
  grid:
    rewards.gamma: [0, 0.5]
  eval_data: EVAL
`

// cancelOn is a progress writer that cancels a context once it has seen a
// line containing marker (to stop a sweep between points, as a kill would).
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if strings.Contains(c.buf.String(), c.marker) {
		c.cancel()
	}
	return len(p), nil
}

func TestSweepCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two tiny models")
	}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sweep.yaml")
	evalData := evalSubset(t, "one.jsonl", 42)
	if err := os.WriteFile(cfgPath, []byte(repoYAML(t, strings.Replace(microSweep, "EVAL", evalData, 1))), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "sweep")

	// A sweep stopped after its first point (the context is cancelled as
	// point 0 finishes): point 0 is DONE, point 1 not.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := &cancelOn{marker: "gamma=0: done in", cancel: cancel}
	cmd := newRootCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(stop)
	cmd.SetArgs([]string{"--config", cfgPath, "sweep", "--out", out})
	if err := cmd.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "stopped before point 1") {
		t.Fatalf("a cancelled sweep: error %v\n%s", err, stop.buf.String())
	}
	p0, p1 := filepath.Join(out, "gamma=0"), filepath.Join(out, "gamma=0.5")
	if _, err := os.Stat(filepath.Join(p0, "DONE")); err != nil {
		t.Fatalf("point 0 not finished: %v", err)
	}
	if _, err := os.Stat(p1); !os.IsNotExist(err) {
		t.Fatalf("point 1 started after the cancel: %v", err)
	}
	// Each point folder holds the training run and the eval of its final checkpoint.
	for _, f := range []string{"config.yaml", "metrics.jsonl", "checkpoint-1/config.json", "eval_config.yaml",
		eval.DecisionsJSONL, eval.ReportJSON, eval.ReportMarkdown} {
		if _, err := os.Stat(filepath.Join(p0, f)); err != nil {
			t.Errorf("point 0: %v", err)
		}
	}
	evalCfg, _ := os.ReadFile(filepath.Join(p0, "eval_config.yaml"))
	if !strings.Contains(string(evalCfg), "gamma: 0\n") || !strings.Contains(string(evalCfg), "data: "+evalData) ||
		!strings.Contains(string(evalCfg), "path: "+filepath.Join(p0, "checkpoint-1")) {
		t.Errorf("point 0's eval config is not the point's:\n%s", evalCfg)
	}

	// Run again: point 0 is skipped, point 1 runs, the summary is written.
	_, stderr, err := run(t, "--config", cfgPath, "sweep", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	for _, want := range []string{"2 points over rewards.gamma, 1 already finished, 1 to run", "point 1 (of 0..1) gamma=0.5: running"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("resumed sweep's log lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "point 0 (of 0..1) gamma=0: running") {
		t.Error("the finished point ran again")
	}
	summary, err := os.ReadFile(filepath.Join(out, "summary.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(summary)).ReadAll()
	if err != nil || len(rows) != 3 || rows[0][2] != "rewards.gamma" || rows[1][2] != "0" || rows[2][2] != "0.5" {
		t.Fatalf("summary.csv: %v\n%s", err, summary)
	}
	// The summary's metrics are the points' report.json values.
	r1, err := eval.ReadReport(filepath.Join(p1, eval.ReportJSON))
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	if got, want := rows[2][col["n_turns"]], "1"; got != want || r1.NTurns != 1 {
		t.Errorf("point 1 n_turns: summary %s, report %d, want 1", got, r1.NTurns)
	}

	// --collect rewrites the same summary; --point of a finished point is a no-op.
	if _, stderr, err := run(t, "--config", cfgPath, "sweep", "--out", out, "--collect"); err != nil || !strings.Contains(stderr, "collected 2 of 2 points") {
		t.Fatalf("--collect: %v\n%s", err, stderr)
	}
	if again, _ := os.ReadFile(filepath.Join(out, "summary.csv")); !bytes.Equal(again, summary) {
		t.Errorf("--collect wrote another summary:\n%s\nthan the sweep:\n%s", again, summary)
	}
	if _, stderr, err := run(t, "--config", cfgPath, "sweep", "--out", out, "--point", "1"); err != nil || !strings.Contains(stderr, "already finished") {
		t.Fatalf("--point 1 again: %v\n%s", err, stderr)
	}
	// Finished points are never reused for another configuration: other
	// global overrides, or another eval set, with the same grid.
	for _, args := range [][]string{
		{"--config", cfgPath, "--set", "rewards.lambda=0.5", "sweep", "--out", out},
		{"--config", cfgPath, "--set", "rewards.lambda=0.5", "sweep", "--out", out, "--point", "1"},
		{"--config", cfgPath, "--set", "sweep.eval_data=" + bundledEval, "sweep", "--out", out, "--collect"},
	} {
		_, stderr, err := run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "was run with another configuration") {
			t.Errorf("%v: error %v, want a refusal\n%s", args, err, stderr)
		}
		if strings.Contains(stderr, "running") {
			t.Errorf("%v ran a point:\n%s", args, stderr)
		}
	}
}

func TestSweepPlanAndErrors(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "sweep.yaml")
	if err := os.WriteFile(cfgPath, []byte(repoYAML(t, strings.Replace(microSweep, "EVAL", "eval.jsonl", 1))), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "plan")
	if _, stderr, err := run(t, "--config", cfgPath, "--set", "train.steps=2", "sweep", "--out", out, "--plan"); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	sh, err := os.ReadFile(filepath.Join(out, "plan.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// Each point's command reruns this sweep (config, global --set, out) for
	// that point, with absolute paths, in this directory.
	bin, _ := os.Executable()
	wd, _ := os.Getwd()
	want := bin + " sweep --config " + cfgPath + " --set train.steps=2 --out " + out + " --point 1 ;; # gamma=0.5"
	if !strings.Contains(string(sh), want) || !strings.Contains(string(sh), "\ncd "+wd+"\n") {
		t.Errorf("plan.sh lacks %q or cd %s:\n%s", want, wd, sh)
	}
	// Relative paths become absolute: run from the config's folder.
	relOut := filepath.Join(dir, "rel")
	t.Chdir(dir)
	if _, stderr, err := run(t, "--config", "sweep.yaml", "sweep", "--out", "rel", "--plan"); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	t.Chdir(wd)
	var rel sweep.Schedule
	if data, err := os.ReadFile(filepath.Join(relOut, "plan.json")); err != nil || json.Unmarshal(data, &rel) != nil {
		t.Fatalf("plan.json: %v\n%s", err, data)
	}
	if got := strings.Join(rel.Points[0].Command, " "); got != bin+" sweep --config "+cfgPath+" --out "+relOut+" --point 0" || rel.Dir != dir {
		t.Errorf("plan.json: dir %s, command %s", rel.Dir, got)
	}
	if len(rel.Points[0].ConfigHash) != 64 || rel.Points[0].ConfigHash == rel.Points[1].ConfigHash {
		t.Errorf("plan.json's configuration hashes: %q, %q", rel.Points[0].ConfigHash, rel.Points[1].ConfigHash)
	}
	// --collect with nothing finished: an empty summary that says so.
	if _, stderr, err := run(t, "--config", cfgPath, "sweep", "--out", out, "--collect"); err != nil || !strings.Contains(stderr, "not finished: points [0 1]") {
		t.Errorf("--collect of nothing: %v\n%s", err, stderr)
	}

	bad := filepath.Join(dir, "bad.yaml")
	badGrid := repoYAML(t, strings.Replace(microSweep, "rewards.gamma: [0, 0.5]", "rewards.gamma: [0, 1.5]", 1))
	if err := os.WriteFile(bad, []byte(badGrid), 0o644); err != nil {
		t.Fatal(err)
	}
	// sweep.base_config is relative to the sweep's file (not to the working
	// directory): a sweep file beside its base, planned from elsewhere.
	baseDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(baseDir, "base.yaml"), []byte(repoYAML(t, strings.Replace(microSweep, "EVAL", "eval.jsonl", 1))), 0o644); err != nil {
		t.Fatal(err)
	}
	withBase := filepath.Join(baseDir, "sweep.yaml")
	if err := os.WriteFile(withBase, []byte("sweep:\n  grid:\n    rewards.lambda: [0.5]\n  base_config: base.yaml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := run(t, "--config", withBase, "sweep", "--out", filepath.Join(baseDir, "plan"), "--plan"); err != nil {
		t.Errorf("a base_config beside the sweep file: %v\n%s", err, stderr)
	}

	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--config", cfgPath, "sweep"}, "--out DIR is required"},
		{[]string{"--config", cfgPath, "sweep", "--out", out, "--plan", "--collect"}, "exclusive"},
		{[]string{"--config", cfgPath, "sweep", "--out", out, "--point", "2"}, "no point 2"},
		// Every point's config is checked before anything runs.
		{[]string{"--config", bad, "sweep", "--out", filepath.Join(dir, "bad")}, "point 1 (gamma=1.5): config: rewards.gamma"},
		{[]string{"--config", bad, "sweep", "--out", filepath.Join(dir, "bad"), "--plan"}, "point 1 (gamma=1.5): config: rewards.gamma"},
		{[]string{"--config", bad, "sweep", "--out", filepath.Join(dir, "bad"), "--point", "0"}, "point 1 (gamma=1.5): config: rewards.gamma"},
		{[]string{"--config", bad, "sweep", "--out", filepath.Join(dir, "bad"), "--collect"}, "point 1 (gamma=1.5): config: rewards.gamma"},
		{[]string{"--config", cfgPath, "--set", "sweep.grid={train.nope: [1]}", "sweep", "--out", filepath.Join(dir, "bad"), "--plan"}, `point 0 (nope=1): --set train.nope: unknown key "train.nope"`},
	}
	for _, c := range cases {
		_, _, err := run(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bad")); !os.IsNotExist(err) {
		t.Errorf("a sweep with a bad point wrote its folder: %v", err)
	}
}
