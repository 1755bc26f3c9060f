package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/sweep"
)

// TestLearnGridCell is make learn-grid's plumbing on one tiny cell
// (scripts/learn-grid.sh runs the same commands): configs/synth-grid.yaml
// swept over one γ, one λ and two seeds, each point one GRPO step of one
// trajectory of a one-layer 32-wide model on synthetic data, evaluated on
// two held-out trajectories; then the cell's guard through the guard.yaml
// that `mageguard config` writes. It checks that the grid's settings reach
// each point, that each eval has the synth figures, that the summary has
// the spread over the seeds, and that guard.yaml evaluates a guard the way
// the points were evaluated (sampled, at the grid's temperature).
func TestLearnGridCell(t *testing.T) {
	if testing.Short() {
		t.Skip("trains two tiny models")
	}
	dir := t.TempDir()
	train, held := filepath.Join(dir, "train.jsonl"), filepath.Join(dir, "eval.jsonl")
	for _, args := range [][]string{
		{"data", "synth", "--out", train, "--n", "8", "--seed", "3"},
		{"data", "synth", "--out", held, "--n", "2", "--seed", "4"},
	} {
		if _, stderr, err := run(t, args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr)
		}
	}
	tiny := []string{
		"--set", "model.tokenizer=../../assets/synth-tokenizer",
		"--set", "model.hidden_size=32", "--set", "model.intermediate_size=64", "--set", "model.num_hidden_layers=1",
		"--set", "model.num_attention_heads=1", "--set", "model.num_key_value_heads=1", "--set", "model.head_dim=32",
		"--set", "rollout.group_size=2", "--set", "rollout.max_memory_tokens=24", "--set", "rollout.max_judge_tokens=28",
	}
	cfg := "../../configs/synth-grid.yaml"
	out := filepath.Join(dir, "sweep")
	args := append([]string{"--config", cfg}, tiny...)
	args = append(args, "--set", "train.data="+train, "--set", "sweep.eval_data="+held,
		"--set", "train.steps=1", "--set", "train.trajectories=1",
		"--set", "sweep.grid={rewards.gamma: [0.5], rewards.lambda: [1], train.seed: [1, 2]}",
		"sweep", "--out", out)
	if _, stderr, err := run(t, args...); err != nil {
		t.Fatalf("sweep: %v\n%s", err, stderr)
	}
	for _, seed := range []string{"1", "2"} {
		p := filepath.Join(out, "gamma=0.5,lambda=1,seed="+seed)
		resolved, err := os.ReadFile(filepath.Join(p, "config.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"length_threshold: 20\n", "malicious_weight: 5\n", "temperature: 1\n", "lr_schedule: constant\n", "seed: " + seed + "\n"} {
			if !strings.Contains(string(resolved), want) {
				t.Errorf("seed %s: config.yaml lacks %q", seed, want)
			}
		}
		r, err := eval.ReadReport(filepath.Join(p, eval.ReportJSON))
		if err != nil {
			t.Fatal(err)
		}
		if r.Synth == nil || r.Synth.RetentionByLag == nil || r.Synth.MemoryCharsMean == nil {
			t.Errorf("seed %s: report.json's synth section %+v, want retention and memory characters", seed, r.Synth)
		}
		if _, err := os.Stat(filepath.Join(p, "checkpoint-1", "config.json")); err != nil {
			t.Errorf("seed %s: no final checkpoint: %v", seed, err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, sweep.SummaryMarkdown))
	for _, want := range []string{"| gamma | lambda | Recall at gap ≥ 3 | F1 | FPR | Memory characters |", "| 0.5 | 1 |", "(2) |"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md)
		}
	}
	for _, m := range []string{"recall_gap_ge3", "f1", "fpr", "memory_chars_mean", "retention_injected_lag_ge2", "retention_allowed_lag_ge2"} {
		for _, f := range []string{sweep.HeatmapFile(m), sweep.SpreadFile(m)} {
			if _, err := os.Stat(filepath.Join(out, f)); err != nil {
				t.Error(err)
			}
		}
	}

	// guard.yaml (as learn-grid.sh writes it) evaluates a cell's guard as the sweep did.
	cfgArgs := append([]string{"--config", cfg}, tiny...)
	yamlText, stderr, err := run(t, append(cfgArgs, "--set", "model.path="+filepath.Join(out, "gamma=0.5,lambda=1,seed=1", "checkpoint-1"),
		"--set", "eval.data="+held, "config")...)
	if err != nil {
		t.Fatalf("config: %v\n%s", err, stderr)
	}
	guardYAML := filepath.Join(dir, "guard.yaml")
	if err := os.WriteFile(guardYAML, []byte(yamlText), 0o644); err != nil {
		t.Fatal(err)
	}
	evalOut := filepath.Join(dir, "eval-guard")
	if _, stderr, err := run(t, "--config", guardYAML, "eval", "--model", filepath.Join(out, "gamma=0.5,lambda=1,seed=2", "checkpoint-1"), "--out", evalOut); err != nil {
		t.Fatalf("eval through guard.yaml: %v\n%s", err, stderr)
	}
	a, _ := os.ReadFile(filepath.Join(out, "gamma=0.5,lambda=1,seed=2", eval.DecisionsJSONL))
	b, _ := os.ReadFile(filepath.Join(evalOut, eval.DecisionsJSONL))
	if len(a) == 0 || string(a) != string(b) {
		t.Errorf("guard.yaml's eval of the seed-2 guard differs from the sweep's:\n%s\n---\n%s", a, b)
	}
}
