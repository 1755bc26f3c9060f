package eval

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
)

// TestNothingToEvaluateIsAnError: an empty eval file (which gave exit 0
// and an all-null report) and one whose trajectories have no action are
// errors, and EvaluateInto writes nothing.
func TestNothingToEvaluateIsAnError(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	g, err := rollout.NewGuard(rollout.DefaultConfig(), tok, &scriptedGuard{tok: tok})
	if err != nil {
		t.Fatal(err)
	}
	noAction := &dataset.Trajectory{ID: "x", Source: "s", Suite: "banking", UserTaskID: "u", Model: "m", Turns: []dataset.Turn{}}
	for _, c := range []struct {
		name  string
		trajs []*dataset.Trajectory
		want  string
	}{
		{"no trajectory", nil, "nothing to evaluate: 0 trajectories"},
		{"no action", []*dataset.Trajectory{noAction, noAction}, "nothing to evaluate: 2 trajectories, none with an action"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{Sampling: generate.Sampling{Greedy: true}}
			if _, _, err := Evaluate(context.Background(), g, c.trajs, opts, nil); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Evaluate: %v, want %q", err, c.want)
			}
			dir := filepath.Join(t.TempDir(), "out")
			if _, err := EvaluateInto(context.Background(), dir, g, c.trajs, opts, ReportOptions{}, nil); err == nil {
				t.Fatal("EvaluateInto succeeded")
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("EvaluateInto left %v", entries)
			}
		})
	}
}
