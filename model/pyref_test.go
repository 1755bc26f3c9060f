package model

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// pythonReference returns the path of scripts/qwen3_ref.py, the repository's
// own float32 PyTorch Qwen3, skipping the test (and saying why) under -short
// or where /usr/bin/python3 cannot import torch and numpy.
func pythonReference(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the PyTorch reference (starts python3 with torch)")
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", "import torch, numpy").CombinedOutput(); err != nil {
		t.Skipf("no /usr/bin/python3 with torch and numpy (apt-get install python3-torch python3-numpy), so the PyTorch reference check is skipped: %v %s", err, out)
	}
	script, err := filepath.Abs(filepath.Join("..", "scripts", "qwen3_ref.py"))
	if err != nil {
		t.Fatal(err)
	}
	return script
}

// runPythonReference scores the sequences of inputs with scripts/qwen3_ref.py
// on the checkpoint ckpt and returns its output (expected.json's format).
func runPythonReference(t *testing.T, script, ckpt, inputs string) []ScoreSequence {
	t.Helper()
	out := filepath.Join(t.TempDir(), "reference.json")
	cmd := exec.Command("/usr/bin/python3", script, "score", "--ckpt", ckpt, "--inputs", inputs, "--out", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("qwen3_ref.py score %s: %v\n%s", ckpt, err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var got expectedFile
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("qwen3_ref.py's output: %v", err)
	}
	return got.Sequences
}

// TestPythonReferenceMatchesCases checks the repository's PyTorch reference
// itself: on both reference cases (a tied float32 checkpoint, an untied
// bfloat16 one in two shards) its scores equal the cases' expected.json,
// computed by another implementation, within their tolerance (1e-4), with
// identical argmax and greedy tokens.
func TestPythonReferenceMatchesCases(t *testing.T) {
	script := pythonReference(t)
	for _, name := range referenceCases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", name)
			got := runPythonReference(t, script, filepath.Join(dir, "ckpt"), filepath.Join(dir, "inputs.json"))
			ref := readExpected(t, filepath.Join(dir, "expected.json"))
			worstL, worstP, fails := compareScores(ref, got, 1e-4, 1e-4)
			for _, f := range fails {
				t.Error(f)
			}
			t.Logf("qwen3_ref.py against expected.json: max |Δ logits| = %.3g, max |Δ log-prob| = %.3g", worstL, worstP)
		})
	}
}
