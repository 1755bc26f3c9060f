package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyCheckpoint copies the files of a checkpoint directory into a new temp dir.
func copyCheckpoint(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestLoadRejectsMismatches damages copies of the reference checkpoints and
// checks the load errors name the file and the tensor.
func TestLoadRejectsMismatches(t *testing.T) {
	backend := testBackend(t)
	editJSON := func(t *testing.T, path string, edit func(map[string]any)) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		edit(doc)
		out, _ := json.Marshal(doc)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name, ckpt string
		damage     func(t *testing.T, dir string)
		want       []string
	}{
		{"wrong intermediate size", "p1_tied_f32", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "config.json"), func(d map[string]any) { d["intermediate_size"] = 100 })
		}, []string{"model.safetensors", "model.layers.0.mlp.gate_proj.weight", "[192 64]", "[100 64]"}},
		{"untied config, tied weights", "p1_tied_f32", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "config.json"), func(d map[string]any) { d["tie_word_embeddings"] = false })
		}, []string{"lm_head.weight", "missing"}},
		{"attention bias absent from weights", "p1_tied_f32", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "config.json"), func(d map[string]any) { d["attention_bias"] = true })
		}, []string{"model.layers.0.self_attn.q_proj.bias", "missing"}},
		{"tied config, untied weights", "p2_untied_bf16_sharded", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "config.json"), func(d map[string]any) { d["tie_word_embeddings"] = true })
		}, nil}, // allowed: transformers ignores lm_head.weight when tied
		{"index points to the wrong shard", "p2_untied_bf16_sharded", func(t *testing.T, dir string) {
			editJSON(t, filepath.Join(dir, "model.safetensors.index.json"), func(d map[string]any) {
				d["weight_map"].(map[string]any)["model.norm.weight"] = "model-00001-of-00002.safetensors"
			})
		}, []string{"model.safetensors.index.json", "model.norm.weight", "model-00001-of-00002.safetensors"}},
		{"shard missing", "p2_untied_bf16_sharded", func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "model-00002-of-00002.safetensors"))
		}, []string{"model-00002-of-00002.safetensors"}},
		{"truncated shard", "p2_untied_bf16_sharded", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model-00002-of-00002.safetensors")
			data, _ := os.ReadFile(p)
			os.WriteFile(p, data[:len(data)-100], 0o644)
		}, []string{"model-00002-of-00002.safetensors", "lm_head.weight", "truncated"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyCheckpoint(t, filepath.Join("testdata", c.ckpt, "ckpt"))
			c.damage(t, dir)
			_, err := Load(backend, dir)
			if c.want == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
