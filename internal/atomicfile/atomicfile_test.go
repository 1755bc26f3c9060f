package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.txt")
	if err := WriteFile(p, []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileMode(p, []byte("new"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(p)
	if err != nil || string(data) != "new" {
		t.Fatalf("read %q, %v", data, err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left behind: %v", entries)
	}
}

func TestAbortLeavesTheTargetAlone(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.txt")
	if err := WriteFile(p, []byte("old")); err != nil {
		t.Fatal(err)
	}
	f, err := Create(p)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("half"))
	f.Abort()
	if err := f.Commit(); err == nil {
		t.Fatal("commit after abort succeeded")
	}
	data, _ := os.ReadFile(p)
	entries, _ := os.ReadDir(dir)
	if string(data) != "old" || len(entries) != 1 {
		t.Fatalf("target %q, entries %v", data, entries)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
}

func TestCreateInMissingDirFails(t *testing.T) {
	if _, err := Create(filepath.Join(t.TempDir(), "no", "a.txt")); err == nil {
		t.Fatal("created a file in a missing directory")
	}
}

func TestRemoveStaleRemovesOnlyTemporaryNames(t *testing.T) {
	dir := t.TempDir()
	// What a writer killed mid-write leaves: a temporary file of Create and
	// a temporary folder named like model.Save's.
	f, err := Create(filepath.Join(dir, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("half"))
	tmpFile := filepath.Base(f.f.Name())
	tmpDir, err := os.MkdirTemp(dir, ".checkpoint-3.tmp.tmp-*")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(tmpDir, "model.safetensors"), []byte("x"), 0o644)
	keep := []string{"metrics.jsonl", ".tmp-1", "a.tmp-12", ".config.yaml.tmp-", ".x.tmp-12a", "checkpoint-3"}
	for _, name := range keep {
		os.WriteFile(filepath.Join(dir, name), nil, 0o644)
	}
	removed, err := RemoveStale(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 || removed[0] != filepath.Base(tmpDir) && removed[1] != filepath.Base(tmpDir) {
		t.Fatalf("removed %v, want %s and %s", removed, tmpFile, filepath.Base(tmpDir))
	}
	entries, _ := os.ReadDir(dir)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if len(left) != len(keep) {
		t.Fatalf("left %v, want exactly %v", left, keep)
	}
}

// TestCommitSyncsTheDirectory: Commit syncs the target's directory after
// the rename (the new file is already under its name when it does), so
// that the rename is durable.
func TestCommitSyncsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.txt")
	var synced []string
	defer func(old func(string)) { syncDir = old }(syncDir)
	syncDir = func(d string) {
		if data, err := os.ReadFile(p); err != nil || string(data) != "new" {
			t.Errorf("the directory synced before the rename: %q %v", data, err)
		}
		synced = append(synced, d)
	}
	if err := WriteFile(p, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 1 || synced[0] != dir {
		t.Errorf("synced %v, want [%s]", synced, dir)
	}
}
