package main

import (
	"strings"
	"testing"
	"time"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/serve/store"
)

// TestLabelCommand: label writes an operator's label on a stored step
// (read back with its note and name, the last one standing); it is
// refused while a server holds the state, for a label not 0 or 1, a step
// or session that does not exist, and a state directory with no
// database (which it does not create).
func TestLabelCommand(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(dir, store.Options{LockWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Create(&store.Session{ID: "s_a", Owner: "a", Status: store.StatusActive}); err != nil {
		t.Fatal(err)
	}
	st := store.Step{Step: 0, Action: dataset.Action{Name: "send_money", Arguments: []byte(`{}`)}, Decision: store.DecisionAllow}
	if errs, err := s.CommitSteps([]store.Commit{{ID: "s_a", Step: st}}); err != nil || errs[0] != nil {
		t.Fatal(err, errs)
	}
	args := []string{"label", "--state", dir, "--session", "s_a", "--step", "0", "--label", "1", "--note", "an IBAN from the bill", "--by", "alice"}
	if _, _, err := run(t, args...); err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Errorf("while the state is held: %v", err)
	}
	s.Close()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"label", "--state", dir, "--session", "s_a", "--step", "0", "--label", "2"}, "--label 0 (benign) or 1"},
		{[]string{"label", "--state", dir, "--session", "s_a", "--step", "0"}, "--label 0 (benign) or 1"},
		{[]string{"label", "--state", dir, "--session", "s_a", "--step", "1", "--label", "1"}, "has no step 1"},
		{[]string{"label", "--state", dir, "--session", "s_b", "--step", "0", "--label", "1"}, "no session s_b"},
		{[]string{"label", "--state", t.TempDir(), "--session", "s_a", "--step", "0", "--label", "1"}, "no such file"},
	} {
		if _, _, err := run(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args[5:], err, c.want)
		}
	}
	if _, _, err := run(t, "label", "--state", dir, "--session", "s_a", "--step", "0", "--label", "0"); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, args...)
	if err != nil || !strings.Contains(out, "labeled 1 by alice") {
		t.Fatalf("label: %v %s", err, out)
	}
	r, err := store.Open(dir, store.Options{LockWait: time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.GetStep("s_a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if l := got.Label; l == nil || l.Label != 1 || l.Note != "an IBAN from the bill" || l.By != "alice" || time.Since(l.At) > time.Minute {
		t.Errorf("stored label %+v", l)
	}
}
