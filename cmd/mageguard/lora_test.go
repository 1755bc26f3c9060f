package main

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/model/safetensors"
)

// loraConfigYAML is a GRPO run small enough for a test: a random 2-layer Qwen3 of hidden size
// 16 with the real tokenizer, on the train package's six micro trajectories, one-turn windows,
// two chains, structured decoding, β > 0, a large learning rate so that B leaves zero at once.
const loraConfigYAML = `model:
  tokenizer: ../../assets/qwen3
  seed: 3
  hidden_size: 16
  intermediate_size: 32
  num_hidden_layers: 2
  num_attention_heads: 2
  num_key_value_heads: 1
  head_dim: 8
  initializer_range: 0.2
rollout:
  group_size: 2
  structured: true
  max_memory_tokens: 26
  max_judge_tokens: 32
  max_observation_tokens: 64
grpo:
  learning_rate: 0.05
  warmup_steps: 0
  beta: 0.04
train:
  data: ../../train/testdata/micro.jsonl
  steps: 2
  trajectories: 2
  max_turns: 1
  save_every: 0
  keep_last: 0
`

// hashFiles returns the SHA-256 of every file of dir, by name.
func hashFiles(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %x\n", e.Name(), sha256.Sum256(data))
	}
	return b.String()
}

// readFloat32 reads every tensor of a safetensors file as float32, by name.
func readFloat32(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]float32{}
	for _, name := range f.Names() {
		e, _ := f.Entry(name)
		dst := tensors.FromShape(shapes.Make(dtypes.Float32, e.Shape...))
		if err := f.ReadInto(name, dst); err != nil {
			t.Fatal(err)
		}
		out[name] = tensors.MustCopyFlatData[float32](dst)
	}
	return out
}

// scores reads a `model score` / qwen3_ref.py output: per sequence, the last positions'
// logits, every position's log-sum-exp and the next-token log-probs, flattened.
func scores(t *testing.T, path string) []float64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Sequences []struct {
			Logsumexp         []float64   `json:"logsumexp"`
			NextTokenLogprobs []float64   `json:"next_token_logprobs"`
			LastLogits        [][]float64 `json:"last_logits"`
		} `json:"sequences"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []float64
	for _, q := range s.Sequences {
		for _, row := range q.LastLogits {
			out = append(out, row...)
		}
		out = append(append(out, q.Logsumexp...), q.NextTokenLogprobs...)
	}
	return out
}

func maxAbsDiff(t *testing.T, a, b []float64) float64 {
	t.Helper()
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("%d values against %d", len(a), len(b))
	}
	var d float64
	for i := range a {
		d = max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

// TestLoRACheckpointMatchesPEFTMerge is the independent check of LoRA training: a GRPO run with
// a rank-4 adapter (α 8, every projection) on a bfloat16 base writes an adapter checkpoint
// whose B has left zero; scripts/peft_merge.py (numpy, PEFT's rule W + s·B·A, the safetensors
// files parsed by hand) merges it into the base, and scripts/qwen3_ref.py (PyTorch) scores the
// merged model: `mageguard model score --model ADAPTER_DIR` gives the same logits, log-sum-exps
// and next-token log-probs within 1e-4 (while differing from the base's by more); `mageguard
// model merge` writes the same weights (within a float32 rounding of the merged values, and
// bit-identical where nothing was merged); the base's files are bit-identical after training.
// It skips, saying so, only without /usr/bin/python3 with torch and numpy.
func TestLoRACheckpointMatchesPEFTMerge(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import torch, numpy").Run(); err != nil {
		t.Skip("needs /usr/bin/python3 with torch and numpy for the independent merge and scoring: " + err.Error())
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "lora.yaml")
	if err := os.WriteFile(cfg, []byte(repoYAML(t, loraConfigYAML)), 0o644); err != nil {
		t.Fatal(err)
	}
	base, out := filepath.Join(dir, "base"), filepath.Join(dir, "run")
	if _, stderr, err := runStdin(t, "", "model", "init", "--config", cfg, "--out", base, "--set", "model.dtype=bfloat16"); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	before := hashFiles(t, base)
	if _, stderr, err := runStdin(t, "", "train", "--config", cfg, "--model", base, "--out", out,
		"--set", "model.lora.rank=4", "--set", "model.lora.alpha=8"); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	adapter := filepath.Join(out, "checkpoint-2")
	lora := readFloat32(t, filepath.Join(adapter, "adapter_model.safetensors"))
	var maxB float64
	for name, x := range lora {
		if strings.HasSuffix(name, ".lora_B.weight") {
			for _, v := range x {
				maxB = max(maxB, math.Abs(float64(v)))
			}
		}
	}
	if len(lora) != 2*7*2 || maxB == 0 {
		t.Fatalf("%d adapter tensors, max |B| %g: B has not left zero", len(lora), maxB)
	}

	inputs := filepath.Join(dir, "inputs.json")
	os.WriteFile(inputs, []byte(`{"sequences": [[5, 17, 42, 99, 1000, 20000, 7], [151000, 7, 8, 9]], "max_new_tokens": 3, "n_last_logits": 2}`), 0o644)
	goScores, baseScores := filepath.Join(dir, "go.json"), filepath.Join(dir, "base.json")
	for model, path := range map[string]string{adapter: goScores, base: baseScores} {
		if _, stderr, err := runStdin(t, "", "model", "score", "--config", cfg, "--model", model, "--input", inputs, "--out", path); err != nil {
			t.Fatalf("%v\n%s", err, stderr)
		}
	}

	merged := filepath.Join(dir, "merged-py")
	refScores := filepath.Join(dir, "ref.json")
	for _, args := range [][]string{
		{"../../scripts/peft_merge.py", "--adapter", adapter, "--out", merged},
		{"../../scripts/qwen3_ref.py", "score", "--ckpt", merged, "--inputs", inputs, "--out", refScores},
	} {
		if outp, err := exec.Command("/usr/bin/python3", args...).CombinedOutput(); err != nil {
			t.Fatalf("python3 %v: %v\n%s", args, err, outp)
		}
	}
	got, ref, plain := scores(t, goScores), scores(t, refScores), scores(t, baseScores)
	d, moved := maxAbsDiff(t, got, ref), maxAbsDiff(t, got, plain)
	t.Logf("model score --model ADAPTER_DIR vs peft_merge.py + qwen3_ref.py: max |Δ| %.2g; vs the base: %.2g", d, moved)
	if d > 1e-4 {
		t.Errorf("the adapter's scores differ from the independently merged model's by %g (> 1e-4)", d)
	}
	if moved < 1e-3 {
		t.Errorf("the adapter's scores are within %g of the base's: the check cannot tell the adapter apart", moved)
	}

	goMerged := filepath.Join(dir, "merged-go")
	if _, stderr, err := runStdin(t, "", "model", "merge", "--config", cfg, "--adapter", adapter, "--out", goMerged, "--dtype", "float32"); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	a, b := readFloat32(t, filepath.Join(goMerged, "model.safetensors")), readFloat32(t, filepath.Join(merged, "model.safetensors"))
	if len(a) != len(b) {
		t.Fatalf("model merge wrote %d tensors, peft_merge.py %d", len(a), len(b))
	}
	var worst float64
	for name, x := range a {
		y := b[name]
		adapted := lora["base_model.model."+strings.TrimSuffix(name, ".weight")+".lora_A.weight"] != nil
		for i := range x {
			if !adapted && x[i] != y[i] {
				t.Fatalf("%s[%d]: model merge %v, peft_merge.py %v, on a weight no adapter touches", name, i, x[i], y[i])
			}
			worst = max(worst, math.Abs(float64(x[i]-y[i]))/math.Max(1, math.Abs(float64(y[i]))))
		}
	}
	t.Logf("model merge vs peft_merge.py: max relative |Δ weight| %.2g", worst)
	if worst > 1e-6 {
		t.Errorf("model merge's weights differ from peft_merge.py's by %g", worst)
	}
	if after := hashFiles(t, base); after != before {
		t.Errorf("the base's files changed during training:\nbefore\n%safter\n%s", before, after)
	}
}
