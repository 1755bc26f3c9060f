package model

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/model/safetensors"
)

// savedTestModel saves a random model of testConfig into a new folder.
func savedTestModel(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := newTestModel(t, testConfig(), 1).Save(dir, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// setStoredF32 overwrites element i of tensor name in dir/model.safetensors.
func setStoredF32(t *testing.T, dir, name string, i int, v float32) {
	t.Helper()
	path := filepath.Join(dir, "model.safetensors")
	st, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := st.Entry(name)
	off := st.DataStart() + e.Offsets[0] + int64(4*i)
	st.Close()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(binary.LittleEndian.AppendUint32(nil, math.Float32bits(v)), off); err != nil {
		t.Fatal(err)
	}
}

// TestNonFiniteWeightsAreRefusedAtLoad: a checkpoint with a NaN weight
// (which evaluated as a guard rejecting everything "parsed") or an Inf is
// refused by every loader, naming the tensor; model.allow_non_finite loads
// it with a warning saying how many.
func TestNonFiniteWeightsAreRefusedAtLoad(t *testing.T) {
	backend := testBackend(t)
	for _, c := range []struct {
		name  string
		value float32
		dtype dtypes.DType
	}{
		{"NaN into float32", float32(math.NaN()), dtypes.Float32},
		{"+Inf into bfloat16", float32(math.Inf(1)), dtypes.BFloat16},
		{"-Inf into float32", float32(math.Inf(-1)), dtypes.Float32},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := savedTestModel(t)
			setStoredF32(t, dir, "model.layers.1.mlp.up_proj.weight", 7, c.value)
			_, err := LoadAs(backend, dir, c.dtype)
			var nf *safetensors.NonFiniteError
			if !errors.As(err, &nf) || nf.Tensor != "model.layers.1.mlp.up_proj.weight" || nf.Count != 1 || nf.First != 7 ||
				!strings.Contains(err.Error(), "model.allow_non_finite") {
				t.Fatalf("error %v, want the tensor, 1 value at element 7, and the key to allow it", err)
			}
			var log strings.Builder
			m, err := LoadWith(backend, dir, LoadOptions{DType: c.dtype, AllowNonFinite: true, Log: &log})
			if err != nil || m == nil {
				t.Fatalf("allowed: %v", err)
			}
			if !strings.Contains(log.String(), "warning") || !strings.Contains(log.String(), "1 non-finite weights in 1 tensors") {
				t.Fatalf("warning %q", log.String())
			}
		})
	}
	// The optimizer state is read by the same code: a NaN moment is refused too.
	p := filepath.Join(t.TempDir(), "optimizer.safetensors")
	if err := safetensors.WriteFloat32(p, map[string]*tensors.Tensor{"exp_avg/w": tensors.FromFlatDataAndDimensions([]float32{1, float32(math.NaN())}, 2)}); err != nil {
		t.Fatal(err)
	}
	if _, err := safetensors.ReadFloat32(p); err == nil || !strings.Contains(err.Error(), "non-finite") {
		t.Fatalf("NaN moment: %v", err)
	}
}

// TestConfigKeysOutOfRangeAreRefused: a config.json with
// num_hidden_layers 1000000000 (which grew `model score` to 12 GB before
// any check) and every other architecture key beyond its bound are
// refused by LoadConfig, naming the key, before anything is allocated.
func TestConfigKeysOutOfRangeAreRefused(t *testing.T) {
	for _, c := range []struct{ key, value, want string }{
		{"num_hidden_layers", "1000000000", "num_hidden_layers must be in [1, 1024], got 1000000000"},
		{"vocab_size", "4194305", "vocab_size must be in [1, 4194304]"},
		{"hidden_size", "65537", "hidden_size must be in [1, 65536]"},
		{"intermediate_size", "9223372036854775807", "intermediate_size must be in [1, 262144]"},
		{"num_attention_heads", "1025", "num_attention_heads must be in [1, 1024]"},
		{"head_dim", "4096", "head_dim must be in [1, 1024]"},
		{"max_position_embeddings", "16777217", "max_position_embeddings must be in [1, 16777216]"},
		{"rope_theta", "1e300", "rope_theta must be in (0, 1e12]"},
		{"rms_norm_eps", "2", "rms_norm_eps must be in (0, 1]"},
		{"num_key_value_heads", "8", "num_key_value_heads must be at most num_attention_heads (4)"},
	} {
		t.Run(c.key, func(t *testing.T) {
			dir := savedTestModel(t)
			path := filepath.Join(dir, "config.json")
			data, _ := os.ReadFile(path)
			var b strings.Builder
			for _, line := range strings.Split(string(data), "\n") {
				if k, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == `"`+c.key+`"` {
					line = `  "` + c.key + `": ` + c.value + map[bool]string{true: ",", false: ""}[strings.HasSuffix(line, ",")]
				}
				b.WriteString(line + "\n")
			}
			os.WriteFile(path, []byte(b.String()), 0o644)
			_, err := LoadConfig(dir)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v, want %q naming %s", err, c.want, path)
			}
		})
	}
	// A key given twice in config.json is refused too.
	dir := savedTestModel(t)
	path := filepath.Join(dir, "config.json")
	data, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(data), `"hidden_size": 32,`, `"hidden_size": 32, "hidden_size": 64,`, 1)), 0o644)
	if _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), "hidden_size: given twice") {
		t.Fatalf("repeated key: %v", err)
	}
	// So is a config.json larger than any real one, before it is read.
	os.WriteFile(path, make([]byte, maxConfigBytes+1), 0o644)
	if _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), "more than the") {
		t.Fatalf("huge config.json: %v", err)
	}
}

// TestNewRefusesAModelLargerThanMemory: the `model` section's keys build a
// random model; within every bound they can still ask for more memory
// than the machine has, which New refuses before allocating.
func TestNewRefusesAModelLargerThanMemory(t *testing.T) {
	if backend.MachineMemory() == 0 {
		t.Skip("the machine's memory is unknown")
	}
	cfg := testConfig()
	cfg.VocabSize, cfg.HiddenSize, cfg.NumHiddenLayers = 1<<22, 1<<16, 1024 // ~2^38 embedding parameters alone
	_, err := New(testBackend(t), cfg, 1, dtypes.Float32)
	if err == nil || !strings.Contains(err.Error(), "more than this machine's") {
		t.Fatalf("error %v", err)
	}
}
