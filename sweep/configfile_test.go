package sweep_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/sweep"
)

// TestShippedSweepConfig loads configs/sweep.yaml through the real config
// loader (file, then --set) and plans it.
func TestShippedSweepConfig(t *testing.T) {
	cfg, err := config.Load("../configs/sweep.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sweep.NewSchedule(cfg.Sweep)
	if err != nil {
		t.Fatal(err)
	}
	// base_config is relative to the sweep file's folder (config.Load
	// makes it absolute), and it exists.
	wantBase := mustAbs(t, "../configs/default.yaml")
	if len(p.Points) != 20 || p.Points[7].Name != "gamma=0.25,lambda=2" || p.BaseConfig != wantBase {
		t.Fatalf("plan: %d points, point 7 %q, base %q", len(p.Points), p.Points[7].Name, p.BaseConfig)
	}
	base := sweep.ResolveBaseConfig(p.BaseConfig, "../configs/sweep.yaml")
	if _, err := config.Load(base, nil); err != nil || base != wantBase {
		t.Fatalf("base config %s: %v", base, err)
	}
	// --set replaces the whole grid; nested keys flatten.
	cfg, err = config.Load("../configs/sweep.yaml", []string{"sweep.grid.rewards.lambda=[0.5, 1]", "sweep.eval_data=e.jsonl"})
	if err != nil {
		t.Fatal(err)
	}
	p, err = sweep.NewSchedule(cfg.Sweep)
	if err != nil || len(p.Points) != 2 || p.Points[1].Name != "lambda=1" || p.EvalData != mustAbs(t, "e.jsonl") { // --set: the working directory's
		t.Fatalf("with --set: %+v, %v", p, err)
	}
	// Validation errors come back through config.Load, naming the key.
	_, err = config.Load("../configs/sweep.yaml", []string{"sweep.grid={a.b: []}"})
	if err == nil || !strings.Contains(err.Error(), "config: sweep.grid.a.b must list at least one value") {
		t.Fatalf("got %v", err)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
