package train

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/mageguard/mageguard/model/checkpoint"
)

// TestCompareResumeConfig: a change of a key that changes what the
// checkpoint is (architecture, tokenizer, dtype) is refused naming every
// such key; other changes (learning rate, γ, the backend) are returned,
// sorted, with their old and new values.
func TestCompareResumeConfig(t *testing.T) {
	recorded := `model:
  tokenizer: assets/qwen3
  dtype: float32
  hidden_size: 64
  num_hidden_layers: 2
  backend: go
  eos_token_id: [1, 2]
grpo:
  learning_rate: 0.001
  master_dtype: float32
rewards:
  gamma: 0.5
train:
  steps: 8
`
	cases := []struct {
		name    string
		edit    map[string]string // "old line" → "new line"
		refused string            // the error names these keys ("" when none)
		changed []string          // the changes, as "key was → now"
	}{
		{"nothing", nil, "", nil},
		{"architecture", map[string]string{"hidden_size: 64": "hidden_size: 128", "num_hidden_layers: 2": "num_hidden_layers: 4"},
			"model.hidden_size 64 → 128, model.num_hidden_layers 2 → 4", nil},
		{"tokenizer", map[string]string{"tokenizer: assets/qwen3": "tokenizer: assets/synth-tokenizer"}, `model.tokenizer "assets/qwen3" → "assets/synth-tokenizer"`, nil},
		{"dtype", map[string]string{"dtype: float32\n  hidden": "dtype: bfloat16\n  hidden"}, `model.dtype "float32" → "bfloat16"`, nil},
		{"master dtype", map[string]string{"master_dtype: float32": "master_dtype: bfloat16"}, "grpo.master_dtype", nil},
		{"eos ids", map[string]string{"[1, 2]": "[1, 3]"}, "model.eos_token_id [1,2] → [1,3]", nil},
		{"training keys", map[string]string{"learning_rate: 0.001": "learning_rate: 0.5", "gamma: 0.5": "gamma: 0.9", "steps: 8": "steps: 16", "backend: go": "backend: xla"}, "",
			[]string{"grpo.learning_rate 0.001 → 0.5", `model.backend "go" → "xla"`, "rewards.gamma 0.5 → 0.9", "train.steps 8 → 16"}},
		{"a new key", map[string]string{"steps: 8": "steps: 8\n  eval_every: 4"}, "", []string{"train.eval_every (not set) → 4"}},
	}
	for _, c := range cases {
		now := recorded
		for old, repl := range c.edit {
			if !strings.Contains(now, old) {
				t.Fatalf("%s: no %q", c.name, old)
			}
			now = strings.Replace(now, old, repl, 1)
		}
		changes, err := compareResumeConfig([]byte(recorded), []byte(now))
		if (c.refused == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.refused)) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.refused)
			continue
		}
		if err != nil {
			continue
		}
		var got []string
		for _, ch := range changes {
			got = append(got, ch.String())
		}
		if strings.Join(got, "; ") != strings.Join(c.changed, "; ") {
			t.Errorf("%s: changes %q, want %q", c.name, got, c.changed)
		}
	}
}

// TestResumeRefusesAnotherCheckpointAndSaysWhatChanged: `train --resume`
// with model.hidden_size changed is refused before anything is trained
// (before, it trained the checkpoint as it was and rewrote config.yaml to
// say otherwise); with the learning rate changed it trains, and the log
// and the first metrics line of the resumed run say so.
func TestResumeRefusesAnotherCheckpointAndSaysWhatChanged(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	o := microOptions(t, filepath.Join(t.TempDir(), "out"))
	o.Train.Steps, o.Train.LogRollouts = 1, false
	resolved := func(o Options) []byte {
		b, err := yaml.Marshal(map[string]any{"model": o.Model, "grpo": o.GRPO, "train": o.Train})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	o.ResolvedConfig = resolved(o)
	if _, err := Run(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	// The checkpoint records the settings it was trained with.
	if got, err := os.ReadFile(filepath.Join(o.Out, "checkpoint-1", checkpoint.SettingsFile)); err != nil || !bytes.Equal(got, o.ResolvedConfig) {
		t.Fatalf("checkpoint-1/%s: %v, holds %q, want the run's configuration %q", checkpoint.SettingsFile, err, got, o.ResolvedConfig)
	}
	wider := o
	wider.Resume, wider.Train.Steps = true, 2
	wider.Model.HiddenSize = 16
	wider.ResolvedConfig = resolved(wider)
	if _, err := Run(context.Background(), wider); err == nil || !strings.Contains(err.Error(), "model.hidden_size 8 → 16") {
		t.Fatalf("resume with another hidden size: %v", err)
	}
	faster := o
	faster.Resume, faster.Train.Steps = true, 2
	faster.GRPO.LearningRate = 0.5
	faster.ResolvedConfig = resolved(faster)
	var log strings.Builder
	faster.Progress = &log
	if _, err := Run(context.Background(), faster); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "grpo.learning_rate 0.05 → 0.5") {
		t.Errorf("the log does not say the learning rate changed:\n%s", log.String())
	}
	lines := readJSONL[map[string]any](t, filepath.Join(o.Out, "metrics.jsonl"))
	if len(lines) != 2 || lines[0]["config_changed"] != nil {
		t.Fatalf("%d metrics lines: %v", len(lines), lines)
	}
	changed, _ := lines[1]["config_changed"].(map[string]any)
	if lr, _ := changed["grpo.learning_rate"].([]any); len(lr) != 2 || lr[0] != 0.05 || lr[1] != 0.5 {
		t.Errorf("config_changed %v", lines[1]["config_changed"])
	}
}
