package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

// TestStdoutKeepsOnlyData runs model commands as main does: the line
// simplego prints when a command builds its backend goes to stderr with -v
// and nowhere without it, the
// data of `model inspect` to stdout; and `model score` applied the model
// section's process settings (model.gc_percent, model.memory_limit_mb),
// which building a backend does not.
func TestStdoutKeepsOnlyData(t *testing.T) {
	dir := t.TempDir()
	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	savedOut, savedErr := os.Stdout, os.Stderr
	savedGC, savedLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	defer func() {
		os.Stdout, os.Stderr = savedOut, savedErr
		debug.SetGCPercent(savedGC)
		debug.SetMemoryLimit(savedLimit)
	}()
	ckpt, input := filepath.Join(dir, "ckpt"), filepath.Join(dir, "inputs.json")
	if err := os.WriteFile(input, []byte(`{"sequences": [[1, 5, 7]], "max_new_tokens": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-v", "model", "init", "--out", ckpt, "--set", "model.vocab_size=300", "--set", "model.hidden_size=32", "--set", "model.tokenizer=",
			"--set", "model.bos_token_id=1", "--set", "model.eos_token_id=[2]"},
		{"model", "score", "--model", ckpt, "--input", input, "--out", filepath.Join(dir, "scores.json"),
			"--set", "model.gc_percent=77", "--set", "model.memory_limit_mb=3000"},
		{"model", "inspect", "--model", ckpt},
	} {
		os.Stdout, os.Stderr = stdout, stderr // as the process starts
		root := newRootCmd()
		keepStdoutForData(root, args)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	os.Stdout, os.Stderr = savedOut, savedErr
	out, _ := os.ReadFile(stdout.Name())
	errOut, _ := os.ReadFile(stderr.Name())
	if !strings.HasPrefix(string(out), "{") || strings.Contains(string(out), "SimpleGo") {
		t.Errorf("stdout holds more than inspect's JSON:\n%s", out)
	}
	if strings.Count(string(errOut), "SimpleGo backend: parallelism set to -1") != 1 {
		t.Errorf("stderr does not hold simplego's line once (model init -v, not model score without -v):\n%s", errOut)
	}
	if gc != 77 || limit != 3000<<20 {
		t.Errorf("after model score: GC percent %d, memory limit %d; want 77 and %d", gc, limit, 3000<<20)
	}
}
