package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/model"
)

// TestAcceptanceEval is the long acceptance run of `mageguard eval` (`make
// acceptance-eval`; skipped unless MAGEGUARD_ACCEPTANCE names an output
// folder): a random checkpoint of the default tiny architecture, evaluated
// with structured decoding over the bundled eval split as MAGE and as
// judge-only, then MAGE again with judge-only as its baseline, and the
// reports compared. MAGEGUARD_ACCEPTANCE_LIMIT=N evaluates the first N
// trajectories only. Everything stays in the output folder for reading.
func TestAcceptanceEval(t *testing.T) {
	out := os.Getenv("MAGEGUARD_ACCEPTANCE")
	if out == "" {
		t.Skip("set MAGEGUARD_ACCEPTANCE=DIR to run (make acceptance-eval)")
	}
	limit := os.Getenv("MAGEGUARD_ACCEPTANCE_LIMIT")
	if limit == "" {
		limit = "0"
	}
	ckpt := filepath.Join(out, "tiny-random")
	if _, err := os.Stat(filepath.Join(ckpt, "config.json")); err != nil {
		backend, err := model.NewBackend(model.DefaultBackendConfig())
		if err != nil {
			t.Fatal(err)
		}
		cfg := model.DefaultTinyConfig()
		m, err := model.New(backend, &cfg, 1, dtypes.Float32)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Save(ckpt, model.SaveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	common := []string{"--model", ckpt, "--data", bundledEval, "--limit", limit, "--set", tokSet,
		"--set", "rollout.structured=true", "--set", "rollout.max_memory_tokens=48", "--set", "rollout.max_judge_tokens=40"}
	runs := []struct {
		dir  string
		args []string
	}{
		{"judge-only", []string{"--variant", "judge-only"}},
		{"mage", []string{"--baseline", filepath.Join(out, "judge-only")}},
	}
	var dirs []string
	for _, r := range runs {
		dir := filepath.Join(out, r.dir)
		dirs = append(dirs, dir)
		args := append(append([]string{"eval", "--out", dir}, common...), r.args...)
		_, stderr, err := run(t, args...)
		t.Logf("mageguard %s\n%s", strings.Join(args, " "), stderr)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := eval.ReadDecisions(filepath.Join(dir, eval.DecisionsJSONL))
		if err != nil {
			t.Fatal(err)
		}
		report, err := eval.ReadReport(filepath.Join(dir, eval.ReportJSON))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := eval.MarshalReport(eval.Compute(ds, report.NSkipped))
		got, _ := eval.MarshalReport(report)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: report.json does not follow from decisions.jsonl", dir)
		}
		if v := report.JudgeFormatViolationRate; v == nil || *v != 0 {
			t.Errorf("%s: structured decoding left judge format violations: %v", dir, fmtRate(v))
		}
	}
	stdout, _, err := run(t, append([]string{"eval", "--compare"}, dirs...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "compare.md"), []byte(stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("eval --compare:\n%s", stdout)
}

func fmtRate(v *float64) string { return eval.Format(eval.Field{Kind: eval.Rate, Value: v}) }
