package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runModel runs `mageguard model args...` and returns stdout and the error.
func runModel(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs(append([]string{"model"}, args...))
	err := root.Execute()
	return out.String(), err
}

// TestModelCommands: init a small random checkpoint, convert it to sharded
// bfloat16, inspect both, score with each (the scores must agree to the
// bfloat16 rounding of the weights), and refuse to overwrite.
func TestModelCommands(t *testing.T) {
	dir := t.TempDir()
	small := []string{"--set", "model.vocab_size=300", "--set", "model.hidden_size=32", "--set", "model.tokenizer=",
		"--set", "model.initializer_range=0.2", "--set", "model.bos_token_id=1", "--set", "model.eos_token_id=[2]"}
	ckpt := filepath.Join(dir, "ckpt")
	if _, err := runModel(t, append([]string{"init", "--out", ckpt}, small...)...); err != nil {
		t.Fatal(err)
	}
	if _, err := runModel(t, append([]string{"init", "--out", ckpt}, small...)...); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("init over an existing checkpoint: %v", err)
	}
	bf := filepath.Join(dir, "bf16")
	if _, err := runModel(t, "convert", "--model", ckpt, "--out", bf, "--dtype", "bfloat16", "--max-shard-bytes", "10000", "--tokenizer", "-"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, dtype string
		sharded    bool
	}{{ckpt, "F32", false}, {bf, "BF16", true}} {
		out, err := runModel(t, "inspect", "--model", c.dir)
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Parameters   int64            `json:"parameters"`
			StoredDTypes map[string]int64 `json:"stored_dtypes"`
			Files        map[string]int64 `json:"files"`
		}
		if err := json.Unmarshal([]byte(out), &info); err != nil {
			t.Fatalf("inspect output %q: %v", out, err)
		}
		// 300·32 embedding + 2 layers × (32·(64+32+32) + 64·32 + 3·192·32 + 2·32 + 2·16) + 32 final norm.
		want := int64(300*32 + 2*(32*128+64*32+3*192*32+2*32+2*16) + 32)
		if info.Parameters != want || info.StoredDTypes[c.dtype] != want || (len(info.Files) > 1) != c.sharded {
			t.Errorf("%s: inspect %+v, want %d %s parameters", c.dir, info, want, c.dtype)
		}
	}
	in := filepath.Join(dir, "inputs.json")
	os.WriteFile(in, []byte(`{"sequences": [[5, 17, 42, 99], [7]], "max_new_tokens": 3, "n_last_logits": 2}`), 0o644)
	scores := map[string][]float64{}
	for _, d := range []string{ckpt, bf} {
		outPath := filepath.Join(dir, filepath.Base(d)+".json")
		if _, err := runModel(t, "score", "--model", d, "--input", in, "--out", outPath); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(outPath)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), "null") {
			t.Errorf("score output has null where the reference has []: %s", data)
		}
		var got struct {
			Sequences []struct {
				Argmax            []int     `json:"argmax"`
				NextTokenLogprobs []float64 `json:"next_token_logprobs"`
				LastLogits        [][]float64
				GreedyNewTokens   []int `json:"greedy_new_tokens"`
			} `json:"sequences"`
		}
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatal(err)
		}
		s0, s1 := got.Sequences[0], got.Sequences[1]
		if len(s0.Argmax) != 4 || len(s0.NextTokenLogprobs) != 3 || len(s1.NextTokenLogprobs) != 0 ||
			len(s0.GreedyNewTokens) != 3 || len(s1.GreedyNewTokens) != 3 {
			t.Errorf("%s: array lengths %+v", d, got)
		}
		scores[d] = s0.NextTokenLogprobs
	}
	for i := range scores[ckpt] {
		if d := scores[ckpt][i] - scores[bf][i]; d > 0.05 || d < -0.05 {
			t.Errorf("log-prob %d: float32 %g, bfloat16 %g", i, scores[ckpt][i], scores[bf][i])
		}
	}
	if _, err := runModel(t, "score", "--model", ckpt, "--input", filepath.Join(dir, "missing.json"), "--out", filepath.Join(dir, "x.json")); err == nil {
		t.Error("score with a missing input: no error")
	}
}

// TestModelGenerate inits the tiny model with the bundled Qwen3 tokenizer
// and generates greedily: same text twice, at most --max-new-tokens tokens.
func TestModelGenerate(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 39 MB checkpoint")
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := runModel(t, "init", "--config", "../../configs/model-tiny.yaml", "--out", dir,
		"--set", "model.tokenizer=../../assets/qwen3"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json", "model.safetensors"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("init did not write %s", f)
		}
	}
	args := []string{"generate", "--model", dir, "--prompt", "Hello, world", "--max-new-tokens", "5", "--json", "--chat"}
	a, err := runModel(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := runModel(t, args...)
	var g struct {
		PromptIDs []int     `json:"prompt_ids"`
		Tokens    []int     `json:"tokens"`
		LogProbs  []float64 `json:"log_probs"`
	}
	if err := json.Unmarshal([]byte(a), &g); err != nil {
		t.Fatalf("%q: %v", a, err)
	}
	// <|im_start|>user\nHello, world<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n
	if g.PromptIDs[0] != 151644 || len(g.Tokens) == 0 || len(g.Tokens) > 5 || len(g.LogProbs) != len(g.Tokens) || a != b {
		t.Errorf("generate: %s / %s", a, b)
	}
}
