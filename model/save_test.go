package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/model/checkpoint"
	"github.com/mageguard/mageguard/model/safetensors"
)

// weightsF32 returns every weight of m as float32 values, by HF name.
func weightsF32(t *testing.T, m *Model) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for _, s := range tensorSpecs(&m.cfg) {
		v, err := m.weightTensor(s.name)
		if err != nil {
			t.Fatal(err)
		}
		if v.DType() == dtypes.BFloat16 {
			for _, b := range tensors.MustCopyFlatData[bfloat16.BFloat16](v) {
				out[s.name] = append(out[s.name], b.Float32())
			}
		} else {
			out[s.name] = tensors.MustCopyFlatData[float32](v)
		}
	}
	return out
}

func dirFiles(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// TestSaveLoadRoundTrip saves random models (float32 single file, bfloat16
// in shards, untied with attention biases) and loads them back: the weights
// must come back exactly (bfloat16: the nearest-even rounding of float32).
func TestSaveLoadRoundTrip(t *testing.T) {
	backend := testBackend(t)
	tok := t.TempDir()
	os.WriteFile(filepath.Join(tok, "tokenizer.json"), []byte(`{"model":{}}`), 0o644)
	os.WriteFile(filepath.Join(tok, "tokenizer_config.json"), []byte(`{}`), 0o644)
	biased := testConfig()
	biased.AttentionBias = true
	cases := []struct {
		name       string
		cfg        *Config
		dtype      dtypes.DType
		opts       SaveOptions
		wantFiles  []string
		loadAsBF16 bool
	}{
		{"f32 single", testConfig(), dtypes.Float32, SaveOptions{},
			[]string{"config.json", "generation_config.json", "model.safetensors"}, false},
		{"f32 saved as bf16 in shards", testConfig(), dtypes.Float32, SaveOptions{DType: "bfloat16", MaxShardBytes: 20000, TokenizerDir: tok},
			nil, true},
		{"bf16 model, untied with biases", func() *Config { c := *biased; c.TieWordEmbeddings = false; return &c }(), dtypes.BFloat16,
			SaveOptions{MaxShardBytes: -1}, []string{"config.json", "generation_config.json", "model.safetensors"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := New(backend, c.cfg, 11, c.dtype)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "ckpt")
			if err := m.Save(dir, c.opts); err != nil {
				t.Fatal(err)
			}
			files := dirFiles(t, dir)
			if c.wantFiles != nil && !slices.Equal(files, c.wantFiles) {
				t.Errorf("files %v, want %v", files, c.wantFiles)
			}
			if c.opts.MaxShardBytes > 0 {
				checkShards(t, dir, m, c.opts.MaxShardBytes)
				if !slices.Contains(files, "tokenizer.json") || !slices.Contains(files, "tokenizer_config.json") {
					t.Errorf("tokenizer files not copied: %v", files)
				}
			}
			back, err := Load(backend, dir)
			if err != nil {
				t.Fatal(err)
			}
			if back.cfg.String() != m.cfg.String() {
				t.Errorf("config %s, want %s", back.cfg.String(), m.cfg.String())
			}
			want, got := weightsF32(t, m), weightsF32(t, back)
			for name, w := range want {
				for i := range w {
					x := w[i]
					if c.loadAsBF16 {
						x = safetensors.BF16FromFloat32(x).Float32()
					}
					if got[name][i] != x {
						t.Fatalf("%s[%d] = %g, want %g", name, i, got[name][i], x)
					}
				}
			}
			// Saving again over the directory: a single file replaces the shards.
			if err := back.Save(dir, SaveOptions{MaxShardBytes: -1}); err != nil {
				t.Fatal(err)
			}
			for _, f := range dirFiles(t, dir) {
				if strings.HasPrefix(f, "model-") || f == "model.safetensors.index.json" || strings.Contains(f, ".tmp-") {
					t.Errorf("stale file %s after re-save", f)
				}
			}
		})
	}
}

// TestSaveKeepsReferenceBits loads the bfloat16 reference checkpoint and
// saves it as bfloat16: every tensor's bytes must equal the original's.
func TestSaveKeepsReferenceBits(t *testing.T) {
	src := "testdata/p2_untied_bf16_sharded/ckpt"
	m, err := Load(testBackend(t), src)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	if err := m.Save(dir, SaveOptions{DType: "bfloat16"}); err != nil {
		t.Fatal(err)
	}
	orig, err := checkpoint.OpenWeights(src)
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	saved, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer saved.Close()
	read := func(f *safetensors.File, name string) []byte {
		e, _ := f.Entry(name)
		b := make([]byte, e.Offsets[1]-e.Offsets[0])
		raw, err := os.Open(f.Path())
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		if _, err := raw.ReadAt(b, f.DataStart()+e.Offsets[0]); err != nil {
			t.Fatal(err)
		}
		return b
	}
	if len(saved.Names()) != len(orig.Names()) {
		t.Fatalf("saved %d tensors, original has %d", len(saved.Names()), len(orig.Names()))
	}
	for _, name := range orig.Names() {
		if string(read(orig.File(name), name)) != string(read(saved, name)) {
			t.Errorf("tensor %s: bytes differ", name)
		}
	}
}

// TestPythonReferenceReadsSavedCheckpoint is the serving-stack check: a
// checkpoint written by Save (random init, bfloat16, sharded) is read by the
// repository's independent PyTorch reference (scripts/qwen3_ref.py), whose
// scores must match Score within 1e-4. It is skipped, saying so, under
// -short or where /usr/bin/python3 has no torch.
func TestPythonReferenceReadsSavedCheckpoint(t *testing.T) {
	script := pythonReference(t)
	cfg := testConfig()
	cfg.TieWordEmbeddings = false
	m, err := New(testBackend(t), cfg, 21, dtypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := m.Save(dir, SaveOptions{DType: "bfloat16", MaxShardBytes: 30000}); err != nil {
		t.Fatal(err)
	}
	inPath := filepath.Join(t.TempDir(), "inputs.json")
	os.WriteFile(inPath, []byte(`{"sequences": [[5, 17, 42, 99, 3], [7, 120, 64], [200, 31, 250, 11, 9, 1, 100]], "max_new_tokens": 6, "n_last_logits": 2}`), 0o644)
	ref := runPythonReference(t, script, dir, inPath)
	loaded, err := Load(testBackend(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	in := readInputs(t, inPath)
	got, err := loaded.Score(in.Sequences, in.ScoreOptions)
	if err != nil {
		t.Fatal(err)
	}
	worstL, worstP, fails := compareScores(&expectedFile{Sequences: ref}, got, 1e-4, 1e-4)
	for _, f := range fails {
		t.Error(f)
	}
	t.Logf("max |Δ logits| = %.3g, max |Δ log-prob| = %.3g", worstL, worstP)
}

// checkShards checks a sharded save: the index maps every tensor to a shard
// named model-0000k-of-0000n that holds it, n is the number of shard files,
// at least ⌈total/max⌉, and no shard of several tensors exceeds max bytes.
func checkShards(t *testing.T, dir string, m *Model, maxBytes int64) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx struct { // model.safetensors.index.json
		Metadata  map[string]any    `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatal(err)
	}
	var shardFiles []string
	for _, f := range dirFiles(t, dir) {
		if strings.HasPrefix(f, "model-") && strings.HasSuffix(f, ".safetensors") {
			shardFiles = append(shardFiles, f)
		}
	}
	n := len(shardFiles)
	var total int64
	for _, s := range tensorSpecs(&m.cfg) {
		file, ok := idx.WeightMap[s.name]
		if !ok {
			t.Errorf("index lacks %s", s.name)
			continue
		}
		if !strings.HasSuffix(file, fmt.Sprintf("-of-%05d.safetensors", n)) {
			t.Errorf("%s in %s, but there are %d shards", s.name, file, n)
		}
		size := int64(2)
		for _, d := range s.shape {
			size *= int64(d)
		}
		total += size
	}
	if want := int((total + maxBytes - 1) / maxBytes); n < want || n < 2 {
		t.Errorf("%d shards for %d bytes at most %d per shard", n, total, maxBytes)
	}
	if got := idx.Metadata["total_size"]; got != float64(total) {
		t.Errorf("index total_size %v, want %d", got, total)
	}
	for _, f := range shardFiles {
		st, err := safetensors.Open(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		var size int64
		for _, name := range st.Names() {
			e, _ := st.Entry(name)
			size += e.Offsets[1] - e.Offsets[0]
		}
		if len(st.Names()) > 1 && size > maxBytes {
			t.Errorf("%s holds %d bytes > %d", f, size, maxBytes)
		}
		st.Close()
	}
}
