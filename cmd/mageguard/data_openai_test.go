package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const chatLogs = "../../dataset/openaichat/testdata/conversations.jsonl"

// data import openai writes the hand-written expected file (--unlabeled
// benign), data validate accepts it, and --unlabeled guard is refused
// before any output is made.
func TestDataImportOpenAI(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "chat.jsonl")
	_, errs, err := run(t, "data", "import", "openai", "--in", chatLogs, "--out", out, "--unlabeled", "benign")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errs, "3 trajectories of 3 conversations (0 skipped: no labels), 5 actions, 1 labeled 1") {
		t.Errorf("summary: %s", errs)
	}
	got, _ := os.ReadFile(out)
	want, _ := os.ReadFile("../../dataset/openaichat/testdata/expected.jsonl")
	if string(got) != string(want) || len(want) == 0 {
		t.Errorf("output differs from the expected file:\n%s", got)
	}
	if o, _, err := run(t, "data", "validate", out); err != nil || !strings.Contains(o, "ok: 3 trajectories") {
		t.Errorf("validate: %v %q", err, o)
	}

	bad := filepath.Join(dir, "guard.jsonl")
	_, _, err = run(t, "data", "import", "openai", "--in", chatLogs, "--out", bad, "--unlabeled", "guard")
	if err == nil || !strings.Contains(err.Error(), "no guard decision") {
		t.Errorf("--unlabeled guard: %v", err)
	}
	if _, serr := os.Stat(bad); !os.IsNotExist(serr) {
		t.Errorf("a refused import left %s", bad)
	}
}
