package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorsNameTheFix: each mistake a newcomer makes gets an error that
// says what to write instead, and a failed command leaves no output
// folder it created.
func TestErrorsNameTheFix(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	for _, sub := range []string{"checkpoint-4", "checkpoint-8", "checkpoint-best"} {
		if err := os.MkdirAll(filepath.Join(run, sub), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(run, sub, "config.json"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tiny := "../../configs/tiny.yaml"
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"a size without a unit", []string{"plan", "--config", tiny, "--device-memory", "141"},
			`size "141" has no unit: write 141GB (10^9 bytes) or 141GiB (2^30 bytes)`},
		{"a plan that does not fit", []string{"plan", "--config", "../../configs/default.yaml", "--device-memory", "20GB"},
			"plan: the configuration does not fit the device (exit status 1)"},
		{"train without --out", []string{"train", "--config", tiny}, "train: --out DIR is required"},
		{"sft without --out", []string{"sft", "--config", tiny}, "sft: --out DIR is required"},
		{"a run folder as --model", []string{"eval", "--model", run, "--out", filepath.Join(dir, "e")},
			"is a training run's folder, not a checkpoint: give one of its checkpoints (checkpoint-4, checkpoint-8, checkpoint-best), e.g. --model " + filepath.Join(run, "checkpoint-best")},
		{"a folder as --data", []string{"train", "--config", tiny, "--data", "../../data/agentdojo-mini", "--out", filepath.Join(dir, "t")},
			"train.data (--data) ../../data/agentdojo-mini is a directory: give a trajectory file (.jsonl or .parquet), e.g. ../../data/agentdojo-mini/eval.jsonl"},
		{"a folder to data validate", []string{"data", "validate", "../../data/agentdojo-mini"}, "data validate: ../../data/agentdojo-mini is a directory"},
		{"--set KEY VALUE", []string{"train", "--set", "rewards.gamma", "0.5", "--out", filepath.Join(dir, "t")},
			"--set rewards.gamma 0.5: write --set rewards.gamma=0.5"},
		{"--set KEY alone", []string{"config", "--set", "rewards.gamma"}, "--set rewards.gamma: write --set rewards.gamma=VALUE"},
		{"a misspelt flag", []string{"eval", "--ouput", "x"}, "eval: unknown flag: --ouput (did you mean --out?)"},
		{"a misspelt global flag", []string{"config", "--confg", tiny}, "unknown flag: --confg (did you mean --config?)"},
		{"data validate without a file", []string{"data", "validate"}, "data validate: missing FILE (usage: mageguard data validate FILE..."},
		{"data compare with one file", []string{"data", "compare", "a.jsonl"}, "data compare: missing B (usage:"},
		{"data stats with two files", []string{"data", "stats", "a.jsonl", "b.jsonl"}, `data stats: unexpected argument "b.jsonl" after FILE`},
	} {
		_, stderr, err := runStdin(t, "", c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\n%s\nwant an error containing %q", c.name, err, stderr, c.want)
		}
	}
	for _, name := range []string{"e", "t"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !os.IsNotExist(err) {
			t.Errorf("a failed command left %s behind: %v", name, err)
		}
	}
}

// TestFailedRunsLeaveNoEmptyFolder: a train or eval that fails after it
// created its --out removes it (it holds only the lock and config.yaml);
// a train folder holding a checkpoint is kept for --resume.
func TestFailedRunsLeaveNoEmptyFolder(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.jsonl")
	ckpt := tinyCheckpoint(t)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"train", []string{"train", "--config", "../../configs/tiny.yaml", "--data", missing, "--out", filepath.Join(dir, "train")}},
		{"eval", []string{"eval", "--set", tokSet, "--model", ckpt, "--data", missing, "--out", filepath.Join(dir, "eval")}},
	} {
		if _, stderr, err := runStdin(t, "", c.args...); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
			t.Fatalf("%s on a missing file: %v\n%s", c.name, err, stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, c.name)); !os.IsNotExist(err) {
			t.Errorf("the failed %s left its --out: %v", c.name, err)
		}
	}
	// A folder with a checkpoint in it stays.
	kept := filepath.Join(dir, "kept")
	o := newOutFolder(kept)
	if err := os.MkdirAll(filepath.Join(kept, "checkpoint-2"), 0o755); err != nil {
		t.Fatal(err)
	}
	o.cleanup(os.ErrInvalid, "checkpoint-*")
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("a failed run's folder with a checkpoint was removed: %v", err)
	}
	// One that existed before the run stays, empty or not.
	before := filepath.Join(dir, "before")
	if err := os.Mkdir(before, 0o755); err != nil {
		t.Fatal(err)
	}
	newOutFolder(before).cleanup(os.ErrInvalid)
	if _, err := os.Stat(before); err != nil {
		t.Errorf("a folder that existed before the run was removed: %v", err)
	}
}
