package model

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
)

// A checkpoint saved with the bundled (gzip-compressed) tokenizer holds the
// plain tokenizer.json that serving stacks read: byte-identical to Qwen3-4B's.
func TestSaveDecompressesBundledTokenizer(t *testing.T) {
	backend, err := NewBackend(DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultTinyConfig()
	cfg.VocabSize, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers = 151936, 8, 16, 1
	cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = 1, 1, 8
	m, err := New(backend, &cfg, 1, dtypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := m.Save(dir, SaveOptions{TokenizerDir: "../assets/qwen3"}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	// The sha256 of Qwen3-4B's tokenizer.json (assets/qwen3/README.md).
	if got := hex.EncodeToString(sum[:]); got != "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4" {
		t.Fatalf("tokenizer.json sha256 %s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer_config.json")); err != nil {
		t.Fatal(err)
	}
}
