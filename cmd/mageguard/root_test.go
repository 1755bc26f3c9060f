package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every command checks the whole configuration before it runs, even one
// that reads no section: an unknown key or a bad value is never ignored.
func TestEveryCommandChecksTheConfig(t *testing.T) {
	dir := t.TempDir()
	badFile := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badFile, []byte("rewards:\n  gamma: 0.5\n  gama: 0.25\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	commands := [][]string{
		{"data", "stats", bundledEval},
		{"data", "validate", bundledEval},
		{"tokenize", "--tokenizer", "../../assets/qwen3"},
		{"tokenize", "--tokenizer", "../../assets/qwen3", "--decode"},
		{"eval", "--compare", filepath.Join(dir, "report.json")},
		{"model", "inspect", "--model", dir},
		{"config"},
		{"plan", "--device-memory", "1GB"},
		{"sweep", "--out", filepath.Join(dir, "sweep"), "--plan"},
	}
	bad := []struct {
		flags []string
		want  string
	}{
		{[]string{"--set", "bogus.key=1"}, `--set bogus.key: unknown key "bogus"`},
		{[]string{"--set", "rewards.gamma=1.5"}, "rewards.gamma must be in [0, 1)"},
		{[]string{"--config", badFile}, `line 3: unknown key "rewards.gama"`},
	}
	for _, c := range commands {
		for _, b := range bad {
			args := append(append([]string{}, c...), b.flags...)
			_, _, err := runStdin(t, "[]", args...)
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Errorf("%v: error %v, want one containing %q", args, err, b.want)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "sweep")); !os.IsNotExist(err) {
		t.Errorf("a sweep --plan with a bad config wrote its folder: %v", err)
	}
	// The good path still runs: the config is read once and handed over.
	if out, _, err := runStdin(t, "", "config", "--set", "rewards.gamma=0.25"); err != nil || !strings.Contains(out, "gamma: 0.25") {
		t.Errorf("config --set rewards.gamma=0.25: %v\n%s", err, out)
	}
}

// runStdin runs mageguard with args and stdin; it returns stdout, stderr
// and the error.
func runStdin(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := newRootCmd()
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errb.String(), err
}
