package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/dataset"
)

func TestDataSynthValidatesAndRepeats(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	for _, out := range []string{a, b} {
		if _, errs, err := run(t, "data", "synth", "--out", out, "--n", "40", "--seed", "7", "--min-gap", "2", "--max-gap", "3"); err != nil {
			t.Fatal(err)
		} else if !strings.Contains(errs, "40 trajectories") {
			t.Errorf("summary: %s", errs)
		}
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if len(ab) == 0 || !bytes.Equal(ab, bb) {
		t.Fatal("the same flags and seed wrote different files")
	}
	out, _, err := run(t, "data", "validate", a)
	if err != nil || !strings.Contains(out, "ok: 40 trajectories") {
		t.Errorf("validate: %v %q", err, out)
	}
	trs, err := dataset.ReadAll(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range trs {
		if tr.AttackType != nil && !strings.HasSuffix(*tr.AttackType, "-gap2") && !strings.HasSuffix(*tr.AttackType, "-gap3") && !strings.HasSuffix(*tr.AttackType, "-ignored") {
			t.Errorf("%s: attack_type %s outside --min-gap 2 --max-gap 3", tr.ID, *tr.AttackType)
		}
	}
}

func TestDataSynthSplitIsTaskDisjoint(t *testing.T) {
	dir := t.TempDir()
	train, eval := filepath.Join(dir, "train.jsonl"), filepath.Join(dir, "eval.parquet")
	_, errs, err := run(t, "data", "synth", "--out", train, "--n", "100", "--split", "0.25", "--eval-out", eval)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errs, train) || !strings.Contains(errs, eval) {
		t.Errorf("summary: %s", errs)
	}
	tr, err := dataset.ReadAll(train)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := dataset.ReadAll(eval)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr)+len(ev) != 100 || len(ev) < 25 {
		t.Errorf("split %d + %d, want 100 with at least 25 in eval", len(tr), len(ev))
	}
	tasks := map[string]bool{}
	for _, x := range tr {
		tasks[x.TaskKey()] = true
	}
	for _, x := range ev {
		if tasks[x.TaskKey()] {
			t.Errorf("task %s on both sides", x.TaskKey())
		}
	}
}

func TestDataSynthRefusesBadFlags(t *testing.T) {
	out := filepath.Join(t.TempDir(), "x.jsonl")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"data", "synth"}, "--out is required"},
		{[]string{"data", "synth", "--out", out, "--max-gap", "9"}, "--max-gap 9"},
		{[]string{"data", "synth", "--out", out, "--split", "0.2"}, "--split and --eval-out go together"},
		{[]string{"data", "synth", "--out", out, "--split", "0.2", "--eval-out", out}, "the same file"},
		{[]string{"data", "synth", "--out", out, "--suites", "banking"}, `unknown suite "banking"`},
	} {
		_, _, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused command left %s behind", out)
	}
}
