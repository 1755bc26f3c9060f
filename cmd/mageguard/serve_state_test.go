package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mageguard/mageguard/serve/store"
)

// TestServeCheckStateAndInit: --check-state reports a whole database
// (exit 0) and a truncated one (exit 1, the damage named) without
// changing either; serve refuses to start on the truncated one, and on an
// empty sessions.db unless --init.
func TestServeCheckStateAndInit(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(dir, store.Options{LockWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s_a", "s_b"} {
		if err := s.Create(&store.Session{ID: id, UserPrompt: strings.Repeat("p", 9000), Status: store.StatusActive}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	out, _, err := run(t, "serve", "--check-state", dir)
	if err != nil || !strings.Contains(out, "2 sessions readable whole") || !strings.Contains(out, "nothing damaged") {
		t.Fatalf("check-state of a whole database: %v\n%s", err, out)
	}
	path := filepath.Join(dir, store.DBFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data[:10_000], 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(t, "serve", "--check-state", dir)
	if err == nil || !strings.Contains(out, "truncated") || !strings.Contains(err.Error(), "is damaged (1 problems)") {
		t.Fatalf("check-state of a truncated database: %v\n%s", err, out)
	}
	if after, _ := os.ReadFile(path); len(after) != 10_000 {
		t.Errorf("check-state changed the file: %d bytes", len(after))
	}
	serveArgs := []string{"serve", "--state", dir, "--insecure-no-auth", "--addr", "127.0.0.1:0", "--set", tokSet}
	if _, _, err := run(t, serveArgs...); err == nil || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("serve on a truncated database: %v", err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run(t, serveArgs...); err == nil || !strings.Contains(err.Error(), "give --init") {
		t.Errorf("serve on an empty sessions.db: %v", err)
	}
}
