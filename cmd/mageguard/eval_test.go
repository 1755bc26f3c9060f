package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/internal/lock"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/localgen"
)

const (
	bundledEval = "../../data/agentdojo-mini/eval.jsonl"
	tokSet      = "model.tokenizer=../../assets/qwen3" // the default is relative to the repository root
)

// tinyCheckpoint writes a random Qwen3 with the real vocabulary but a
// 16-wide single layer (2.4M parameters, nearly all of them the embedding),
// so that a decode step is as cheap as the vocabulary allows.
func tinyCheckpoint(t *testing.T) string {
	t.Helper()
	m := guardtest.TinyModel(t, 16, 48, 8, 1)
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := m.Save(dir, model.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// evalSubset writes the bundled eval split's trajectories at the given
// indices (file order) to a new file.
func evalSubset(t *testing.T, name string, idx ...int) string {
	t.Helper()
	all, err := dataset.ReadAll(bundledEval)
	if err != nil {
		t.Fatal(err)
	}
	var sub []*dataset.Trajectory
	for _, i := range idx {
		sub = append(sub, all[i])
	}
	path := filepath.Join(t.TempDir(), name)
	if err := dataset.WriteAll(path, sub); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestEvalCommand(t *testing.T) {
	ckpt := tinyCheckpoint(t)
	// A run without actions (skipped), an attack run of two turns (the
	// second is the attack), a benign run of two turns, an attack run of one.
	data := evalSubset(t, "four.jsonl", 7, 55, 26, 42)
	out := t.TempDir()
	// Two new tokens per call: nothing can parse, so every decision is the
	// fallback reject, and the report must say so.
	fast := []string{"--set", tokSet, "--set", "rollout.max_memory_tokens=2", "--set", "rollout.max_judge_tokens=2", "--model", ckpt, "--data", data}

	mage := filepath.Join(out, "mage")
	stdout, stderr, err := run(t, append([]string{"eval", "--out", mage, "--votes", "3"}, fast...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if stdout != "" {
		t.Errorf("eval wrote to stdout: %q", stdout)
	}
	// Progress comes after every turn of the one chunk (turn 0 ends the
	// one-turn run and 3 of the 5 trajectory-turns), not only at its end.
	for _, want := range []string{"3 trajectories (5 turns), 1 skipped", "eval: 1/3 trajectories, 3/5 turns,", "(chunk 1/1, turn 1/2)",
		"eval: 3/3 trajectories, 5/5 turns,", "2 attack + 1 benign runs (5 turns, 1 skipped",
		"WARNING: the judge's output never parsed", "report: " + filepath.Join(mage, "report.md")} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	ds, err := eval.ReadDecisions(filepath.Join(mage, "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 5 {
		t.Fatalf("%d decisions, want 5", len(ds))
	}
	for _, d := range ds {
		if d.Decision != "reject" || d.JudgeParsed || d.MemoryParsed == nil || *d.MemoryParsed || len(d.Votes) != 3 || d.VoteTokens == 0 {
			t.Errorf("turn %d of %s: %+v, want an unparsed reject with 3 votes", d.Turn, d.TrajectoryID, d)
		}
	}
	// report.json follows from decisions.jsonl and the skipped run.
	report, err := eval.ReadReport(filepath.Join(mage, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := eval.MarshalReport(eval.Compute(ds, 1))
	got, _ := eval.MarshalReport(report)
	if !bytes.Equal(got, want) {
		t.Errorf("report.json is not the report of decisions.jsonl:\n%s\nwant\n%s", got, want)
	}
	if report.JudgeFormatViolationRate == nil || *report.JudgeFormatViolationRate != 1 || report.VoteTokenCostOnline == nil {
		t.Errorf("judge violation rate %v, vote cost %v", report.JudgeFormatViolationRate, report.VoteTokenCostOnline)
	}
	cfgText, err := os.ReadFile(filepath.Join(mage, "eval_config.yaml"))
	if err != nil || !strings.Contains(string(cfgText), "votes: 3") || !strings.Contains(string(cfgText), "max_judge_tokens: 2") {
		t.Errorf("eval_config.yaml: %v\n%s", err, cfgText)
	}

	// Judge-only, then MAGE with it as the baseline of the token-cost plot;
	// --limit beats --set eval.limit.
	judge := filepath.Join(out, "judge")
	if _, stderr, err := run(t, append([]string{"eval", "--out", judge, "--variant", "judge-only"}, fast...)...); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	jd, err := eval.ReadDecisions(filepath.Join(judge, "decisions.jsonl"))
	if err != nil || len(jd) != 5 || jd[0].MemoryParsed != nil || jd[0].MemoryChars != 0 {
		t.Fatalf("judge-only decisions: %v %+v", err, jd)
	}
	limited := filepath.Join(out, "limited")
	args := append([]string{"eval", "--out", limited, "--baseline", judge, "--set", "eval.limit=3", "--limit", "1"}, fast...)
	if _, stderr, err := run(t, args...); err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if ld, err := eval.ReadDecisions(filepath.Join(limited, "decisions.jsonl")); err != nil || len(ld) != 2 {
		t.Errorf("--limit 1: %v, %d decisions, want the first run's 2", err, len(ld))
	}
	md, err := os.ReadFile(filepath.Join(limited, "report.md"))
	if err != nil || !strings.Contains(string(md), "- baseline: "+judge+" (judge-only)") {
		t.Errorf("report.md does not name the judge-only baseline: %v", err)
	}

	// --compare prints one table on stdout, a column per report.
	stdout, _, err = run(t, "eval", "--compare", filepath.Join(mage, "report.json"), judge)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stdout, "| metric | mage | judge |\n") || !strings.Contains(stdout, "| judge_format_violation_rate | 100.0% | 100.0% |") {
		t.Errorf("compare:\n%s", stdout)
	}
}

// TestEvalCommandStructured runs one turn with structured decoding: even a
// random model's calls then parse.
func TestEvalCommandStructured(t *testing.T) {
	if testing.Short() {
		t.Skip("about 50 decode steps of a 151,936-token vocabulary")
	}
	ckpt := tinyCheckpoint(t)
	data := evalSubset(t, "one.jsonl", 42)
	out := filepath.Join(t.TempDir(), "structured")
	_, stderr, err := run(t, "eval", "--set", tokSet, "--model", ckpt, "--data", data, "--out", out, "--set", "rollout.structured=true",
		"--set", "rollout.max_memory_tokens=19", "--set", "rollout.max_judge_tokens=28")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	ds, err := eval.ReadDecisions(filepath.Join(out, "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || !ds[0].JudgeParsed || ds[0].MemoryParsed == nil || !*ds[0].MemoryParsed {
		t.Fatalf("structured decisions %+v: want parsed calls", ds)
	}
	if !strings.Contains(stderr, "Format violations: judge 0.0% of turns, memory 0.0%.") {
		t.Errorf("stderr:\n%s", stderr)
	}
}

func TestEvalCommandErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\"id\": 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notReport := filepath.Join(t.TempDir(), "report.json") // another folder: dir must stay clean
	if err := os.WriteFile(notReport, []byte(`{"foo": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"eval", "--model", dir}, "--out DIR is required"},
		{[]string{"eval", "--out", dir}, "no checkpoint"},
		{[]string{"eval", "--out", dir, "--model", dir, "--variant", "both"}, "rollout.variant must be mage or judge-only"},
		{[]string{"eval", "--out", dir, "--model", dir, "--votes", "0"}, "eval.votes must be >= 1"},
		{[]string{"eval", "--out", dir, "--model", dir, "--data", bad}, "bad.jsonl"},
		{[]string{"eval", "--out", dir, "--model", dir, "--baseline", filepath.Join(dir, "nope")}, "eval --baseline"},
		{[]string{"eval", "--out", dir, "--model", dir, "--data", bundledEval, "--set", tokSet}, "load checkpoint"},
		{[]string{"eval", "--compare", "--model", dir, "x"}, "--model does not apply"},
		{[]string{"eval", "--compare"}, "give one or more report.json"},
		{[]string{"eval", "--compare", filepath.Join(dir, "missing.json")}, "missing.json"},
		{[]string{"eval", "stray"}, "unexpected arguments"},
		{[]string{"eval", "--compare", notReport}, `unknown field "foo"`},
	}
	for _, c := range cases {
		_, _, err := run(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one containing %q", c.args, err, c.want)
		}
	}
	// bad.jsonl and the folder's lock file (eval takes it as train does).
	if es, _ := os.ReadDir(dir); len(es) != 2 || es[0].Name() != lock.FileName {
		t.Errorf("failed evals left files in the output folder: %v", es)
	}
}

func TestTrainEvalHook(t *testing.T) {
	ckpt := tinyCheckpoint(t)
	cfg, err := config.Load("", []string{tokSet, "model.path=" + ckpt, "rollout.max_memory_tokens=2", "rollout.max_judge_tokens=2",
		"train.eval_data=" + evalSubset(t, "three.jsonl", 7, 42, 26), "train.eval_limit=1"})
	if err != nil {
		t.Fatal(err)
	}
	m, tok, err := cfg.Model.Open()
	if err != nil {
		t.Fatal(err)
	}
	gen := &localgen.Generator{Model: m}
	guard, err := rollout.NewGuard(cfg.Rollout, tok, gen)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "eval-3")
	var log bytes.Buffer
	values, err := trainEvalHook(cfg, &log)(context.Background(), gen.Model, guard, 3, dir)
	if err != nil {
		t.Fatal(err)
	}
	// The values are report.json's: one attack run of one turn (the limit),
	// the run without an action before it skipped.
	raw, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var onDisk map[string]any
	if err := json.Unmarshal(raw, &onDisk); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"by_suite", "by_attack_type", "by_horizon", "detection_latency_histogram", "score_thresholds"} {
		delete(onDisk, k)
	}
	if !reflect.DeepEqual(values, onDisk) {
		t.Errorf("hook values %v\nreport.json %v", values, onDisk)
	}
	if values["n_attack"] != 1.0 || values["n_turns"] != 1.0 || values["n_skipped"] != 1.0 || values["bu"] != nil {
		t.Errorf("values %v: want 1 attack run, 1 turn, 1 skipped, bu null", values)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !strings.Contains(string(md), "held-out eval at step 3") || !strings.Contains(log.String(), "eval at step 3: WARNING") {
		t.Errorf("report.md / log do not name the step:\n%s\n%s", md, log.String())
	}
}
