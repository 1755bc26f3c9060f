package model

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTokenizerDir(t *testing.T) {
	ckpt := t.TempDir()
	s := Settings{Path: ckpt, Tokenizer: "assets/qwen3"}
	if got := s.TokenizerDir(); got != "assets/qwen3" {
		t.Fatalf("a checkpoint without tokenizer files: %q", got)
	}
	if err := os.WriteFile(filepath.Join(ckpt, "tokenizer.json.gz"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := s.TokenizerDir(); got != ckpt {
		t.Fatalf("a checkpoint with tokenizer.json.gz: %q", got)
	}
	if got := (&Settings{Tokenizer: "x"}).TokenizerDir(); got != "x" {
		t.Fatalf("no checkpoint: %q", got)
	}
}
