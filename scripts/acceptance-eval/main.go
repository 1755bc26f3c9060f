// Command acceptance-eval is the long acceptance run of `mageguard eval`
// (make acceptance-eval): a random checkpoint of the default tiny
// architecture, evaluated with structured decoding over the bundled eval
// split as judge-only, then as MAGE with judge-only as its baseline, each
// report checked against its decisions, and the two compared
// (DIR/compare.md). Everything stays in DIR for reading. Run it from the
// repository root:
//
//	go run ./scripts/acceptance-eval --bin bin/mageguard --out DIR [--limit N]
package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/scripts/internal/check"
)

func main() {
	bin := flag.String("bin", "bin/mageguard", "the mageguard binary")
	out := flag.String("out", "runs/acceptance", "output folder")
	limit := flag.Int("limit", 0, "evaluate the first N trajectories only (0 = all)")
	flag.Parse()
	check.Main("acceptance-eval", func(t *check.T) { acceptance(t, *bin, *out, *limit) })
}

// run executes the mageguard binary and returns its stdout and stderr.
func run(bin string, args ...string) (string, string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

func acceptance(t *check.T, bin, out string, limit int) {
	ckpt := filepath.Join(out, "tiny-random")
	if _, err := os.Stat(filepath.Join(ckpt, "config.json")); err != nil {
		b, err := backend.New(backend.Default())
		if err != nil {
			t.Fatal(err)
		}
		cfg := model.DefaultTinyConfig()
		m, err := model.New(b, &cfg, 1, dtypes.Float32)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Save(ckpt, model.SaveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	common := []string{"--model", ckpt, "--data", "data/agentdojo-mini/eval.jsonl", "--limit", strconv.Itoa(limit),
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
		_, stderr, err := run(bin, args...)
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
			t.Errorf("%s: structured decoding left judge format violations: %s", dir, eval.Format(eval.Field{Kind: eval.Rate, Value: v}))
		}
	}
	stdout, stderr, err := run(bin, append([]string{"eval", "--compare"}, dirs...)...)
	if err != nil {
		t.Fatalf("eval --compare: %v\n%s", err, stderr)
	}
	if err := os.WriteFile(filepath.Join(out, "compare.md"), []byte(stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("eval --compare:\n%s", stdout)
}
