package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/model/checkpoint"
)

// TestCheckpointCarriesItsSettings: eval given a checkpoint that records
// its settings, without --config, decides exactly as with the config file
// it was made with (here a tokenizer path relative to that file and a
// structured decoding, not the defaults), says which settings it
// used, and --set still overrides them.
func TestCheckpointCarriesItsSettings(t *testing.T) {
	ckpt := tinyCheckpoint(t)
	cfgDir := t.TempDir()
	tok, err := filepath.Rel(cfgDir, mustAbs(t, "../../assets/qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(cfgDir, "guard.yaml")
	text := "model:\n  tokenizer: " + tok + "\nrollout:\n  structured: true\n  max_memory_tokens: 40\n  max_judge_tokens: 36\n"
	if err := os.WriteFile(cfgFile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeSettings(ckpt, cfg); err != nil { // what train writes into each checkpoint
		t.Fatal(err)
	}
	data := evalSubset(t, "two.jsonl", 55, 26)
	out := t.TempDir()
	decisions := func(name string, args ...string) ([]byte, string) {
		t.Helper()
		dir := filepath.Join(out, name)
		_, stderr, err := run(t, append([]string{"eval", "--model", ckpt, "--data", data, "--out", dir}, args...)...)
		if err != nil {
			t.Fatalf("eval %s: %v\n%s", name, err, stderr)
		}
		b, err := os.ReadFile(filepath.Join(dir, "decisions.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		return b, stderr
	}
	withConfig, _ := decisions("with-config", "--config", cfgFile)
	alone, stderr := decisions("alone")
	if !bytes.Equal(alone, withConfig) {
		t.Errorf("eval --model without --config decided otherwise than with --config %s", cfgFile)
	}
	saved := filepath.Join(ckpt, checkpoint.SettingsFile)
	if want := "settings: the checkpoint's " + saved + "\n"; !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
	// --set overrides the checkpoint's settings key by key: structured
	// decoding off, the random model's calls no longer all parse.
	loose, stderr := decisions("loose", "--set", "rollout.structured=false")
	if bytes.Equal(loose, alone) {
		t.Error("--set rollout.structured=false changed no decision")
	}
	if want := "settings: the checkpoint's " + saved + ", then --set rollout.structured=false\n"; !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
}

// TestCommandsRunFromAnyDirectory: from a directory outside the
// repository, the commands that read configs/tiny.yaml's relative paths
// (its tokenizer, its data) find them, and the checkpoint model init
// writes holds its tokenizer and absolute settings.
func TestCommandsRunFromAnyDirectory(t *testing.T) {
	tiny := mustAbs(t, "../../configs/tiny.yaml")
	t.Chdir(t.TempDir())
	if _, stderr, err := run(t, "plan", "--config", tiny); err != nil {
		t.Fatalf("plan: %v\n%s", err, stderr)
	}
	if _, stderr, err := run(t, "model", "init", "--config", tiny, "--out", "m"); err != nil {
		t.Fatalf("model init: %v\n%s", err, stderr)
	}
	for _, f := range []string{"tokenizer.json", checkpoint.SettingsFile} {
		if _, err := os.Stat(filepath.Join("m", f)); err != nil {
			t.Errorf("model init wrote no %s: %v", f, err)
		}
	}
	saved, err := config.Load(filepath.Join("m", checkpoint.SettingsFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	for key, p := range map[string]string{"model.tokenizer": saved.Model.Tokenizer, "train.data": saved.Train.Data, "eval.data": saved.Eval.Data} {
		if !filepath.IsAbs(p) {
			t.Errorf("%s = %q in the settings written: want an absolute path", key, p)
		} else if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
}

// TestTrainThenEvalFromAnyDirectory: from a directory outside the
// repository, a tiny train with configs/tiny.yaml's absolute path writes a
// checkpoint whose settings file is the run's config.yaml, and eval of
// that checkpoint without --config decides exactly as eval with the
// training config.
func TestTrainThenEvalFromAnyDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	tiny := mustAbs(t, "../../configs/tiny.yaml")
	t.Chdir(t.TempDir())
	small := []string{"--set", "train.steps=1", "--set", "train.trajectories=2", "--set", "train.max_turns=1",
		"--set", "rollout.group_size=2", "--set", "train.eval_every=0", "--set", "train.save_every=1", "--set", "model.hidden_size=16",
		"--set", "model.intermediate_size=32", "--set", "model.num_hidden_layers=1", "--set", "model.head_dim=4"}
	if _, stderr, err := run(t, append([]string{"train", "--config", tiny, "--out", "run"}, small...)...); err != nil {
		t.Fatalf("train: %v\n%s", err, stderr)
	}
	saved, err := os.ReadFile(filepath.Join("run", "checkpoint-1", checkpoint.SettingsFile))
	if err != nil {
		t.Fatal(err)
	}
	if runCfg, err := os.ReadFile(filepath.Join("run", "config.yaml")); err != nil || !bytes.Equal(saved, runCfg) {
		t.Errorf("checkpoint-1/%s differs from the run's config.yaml (%v)", checkpoint.SettingsFile, err)
	}
	eval := func(out string, args ...string) []byte {
		t.Helper()
		args = append([]string{"eval", "--model", filepath.Join("run", "checkpoint-1"), "--limit", "2", "--out", out}, args...)
		if _, stderr, err := run(t, args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr)
		}
		b, err := os.ReadFile(filepath.Join(out, "decisions.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	alone := eval("alone")
	if withConfig := eval("with-config", append([]string{"--config", tiny}, small...)...); !bytes.Equal(alone, withConfig) {
		t.Error("eval without --config decided otherwise than with the training config")
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// repoYAML makes a test config's repository paths ("../../assets/…",
// relative to this package) absolute, for a file written elsewhere: a
// config file's relative paths are relative to its own folder.
func repoYAML(t *testing.T, text string) string {
	return strings.ReplaceAll(text, "../../", mustAbs(t, "../..")+"/")
}
