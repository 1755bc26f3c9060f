package model

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/model/checkpoint"
)

// A checkpoint saved with the bundled (gzip-compressed) tokenizer holds the
// plain tokenizer.json that serving stacks read: byte-identical to Qwen3-4B's.
func TestSaveDecompressesBundledTokenizer(t *testing.T) {
	m := newSaveModel(t, 151936)
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

// Tokenizer files read when a run begins are what its checkpoints hold,
// even after the directory they came from is gone (a run's base model
// removed while it trains), and byte-identical to copying them; files
// without a tokenizer.json are refused.
func TestSaveWritesTokenizerFilesRead(t *testing.T) {
	m := newSaveModel(t, 64)
	base := filepath.Join(t.TempDir(), "base")
	if err := m.Save(base, SaveOptions{TokenizerDir: "../assets/synth-tokenizer"}); err != nil {
		t.Fatal(err)
	}
	files, err := checkpoint.ReadTokenizerFiles(base)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files["tokenizer.json"] == nil || files["tokenizer_config.json"] == nil {
		t.Fatalf("read %d files, want tokenizer.json and tokenizer_config.json", len(files))
	}
	if err := os.RemoveAll(base); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := m.Save(dir, SaveOptions{Tokenizer: files}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join("../assets/synth-tokenizer", name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s: %d bytes, want the %d of assets/synth-tokenizer", name, len(got), len(want))
		}
	}
	if err := m.Save(filepath.Join(t.TempDir(), "bad"), SaveOptions{Tokenizer: checkpoint.TokenizerFiles{"vocab.json": []byte("{}")}}); err == nil {
		t.Error("files without tokenizer.json were saved")
	}
	if _, err := checkpoint.ReadTokenizerFiles(t.TempDir()); err == nil {
		t.Error("an empty directory read as a tokenizer")
	}
}

// newSaveModel is a one-layer model of width 8 with vocab embeddings: the
// smallest that Save writes.
func newSaveModel(t *testing.T, vocab int) *Model {
	t.Helper()
	b, err := backend.New(backend.Default())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultTinyConfig()
	cfg.VocabSize, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers = vocab, 8, 16, 1
	cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = 1, 1, 8
	if vocab <= cfg.BOSTokenID {
		cfg.BOSTokenID, cfg.EOSTokenIDs = 1, []int{2}
	}
	m, err := New(b, &cfg, 1, dtypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
