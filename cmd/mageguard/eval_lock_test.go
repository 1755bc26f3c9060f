package main

import (
	"strings"
	"testing"

	"github.com/mageguard/mageguard/internal/lock"
)

// TestTwoEvalsIntoOneOutDoNotMix: eval --out takes the folder's lock as
// train and sweep do, so a second eval into a folder in use is refused at
// once, naming the holder (before, two evals into one --out left one
// run's report.json beside the other's decisions.jsonl, both exiting 0).
func TestTwoEvalsIntoOneOutDoNotMix(t *testing.T) {
	out := t.TempDir()
	lk, err := lock.Acquire(out) // the first eval, still running
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Release()
	_, _, err = run(t, "eval", "--out", out, "--data", "no-such-file.jsonl", "--set", tokSet)
	if err == nil || !strings.Contains(err.Error(), "eval: "+out+" is in use by another mageguard process") {
		t.Fatalf("a second eval into %s: %v", out, err)
	}
}
