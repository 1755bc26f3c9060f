package config

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPathsRelativeToTheirFile pins where a relative path resolves: a
// file's against that file's folder (a base file's against its own), a
// --set one and a default against the working directory; absolute paths
// and built-in teacher names are kept.
func TestPathsRelativeToTheirFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("common/base.yaml", "eval:\n  data: held-out.jsonl\ntrain:\n  data: base-train.jsonl\n")
	cfgFile := write("configs/run.yaml", "base: ../common/base.yaml\nmodel:\n  tokenizer: ../assets/tok\n"+
		"train:\n  data: ../data/train.jsonl\n  eval_data: /abs/eval.jsonl\nsft:\n  teacher: synth-leaky:0.7\n")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(cfgFile, []string{"sweep.eval_data=rel/e.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, got, want string }{
		{"model.tokenizer", cfg.Model.Tokenizer, filepath.Join(dir, "assets/tok")},
		{"train.data", cfg.Train.Data, filepath.Join(dir, "data/train.jsonl")},
		{"train.eval_data", cfg.Train.EvalData, "/abs/eval.jsonl"},
		{"eval.data (from the base file)", cfg.Eval.Data, filepath.Join(dir, "common/held-out.jsonl")},
		{"sft.teacher (a built-in name)", cfg.SFT.Teacher, "synth-leaky:0.7"},
		{"sweep.eval_data (--set)", cfg.Sweep.EvalData, filepath.Join(wd, "rel/e.jsonl")},
		{"model.path (empty: none)", cfg.Model.Path, ""},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.key, c.got, c.want)
		}
	}
	def, err := Load("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(wd, Default().Model.Tokenizer); def.Model.Tokenizer != want {
		t.Errorf("default model.tokenizer = %q, want %q", def.Model.Tokenizer, want)
	}
	// A later file overrides only the keys it sets.
	over := write("over.yaml", "sft:\n  teacher: teach.jsonl\n")
	two, err := LoadFiles([]string{cfgFile, over}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if two.SFT.Teacher != filepath.Join(dir, "teach.jsonl") || two.Train.Data != cfg.Train.Data {
		t.Errorf("two files: sft.teacher %q, train.data %q", two.SFT.Teacher, two.Train.Data)
	}
}

// TestLoadRunKeepsOldRelativePaths: a run's config.yaml written by an older
// mageguard holds paths relative to the working directory; LoadRun reads
// them so (a new one holds absolute paths).
func TestLoadRunKeepsOldRelativePaths(t *testing.T) {
	dir := t.TempDir()
	saved := filepath.Join(dir, "run", "config.yaml")
	if err := os.MkdirAll(filepath.Dir(saved), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(saved, []byte("train:\n  data: data/train.jsonl\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadRun(saved, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(wd, "data/train.jsonl"); cfg.Train.Data != want {
		t.Errorf("train.data = %q, want %q", cfg.Train.Data, want)
	}
}
