package serve

import (
	"errors"
	"testing"
	"time"

	"github.com/mageguard/mageguard/dataset"
)

// TestCommitStepsSkipsStaleSteps: a step whose session moved on or is gone
// is left out; the others of the batch are stored in the same commit.
func TestCommitStepsSkipsStaleSteps(t *testing.T) {
	s, err := OpenStore(t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"a", "b"} {
		if err := s.Create(&Session{ID: id, UserPrompt: "p", Status: StatusActive}); err != nil {
			t.Fatal(err)
		}
	}
	step := func(n int, decision string) Step {
		return Step{Step: n, Action: dataset.Action{Name: "f", Arguments: []byte("{}")}, Memory: "m", MemoryVersion: n + 1, Decision: decision}
	}
	errs, err := s.CommitSteps([]Commit{{"a", step(0, DecisionAllow)}, {"b", step(1, DecisionAllow)}, {"c", step(0, DecisionAllow)}})
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || !errors.Is(errs[1], ErrConflict) || !errors.Is(errs[2], ErrNotFound) {
		t.Fatalf("errors %v", errs)
	}
	if _, err := s.CommitSteps([]Commit{{"a", step(1, DecisionBlock)}}); err != nil {
		t.Fatal(err)
	}
	sess, steps, err := s.GetWithSteps("a")
	if err != nil {
		t.Fatal(err)
	}
	if sess.StepCount != 2 || sess.Status != StatusBlocked || sess.MemoryVersion != 2 || len(steps) != 2 || steps[1].Decision != DecisionBlock {
		t.Errorf("session %+v steps %+v", sess, steps)
	}
	if b, _ := s.Get("b"); b.StepCount != 0 {
		t.Error("the conflicting step was stored")
	}
	if n, _ := s.Count(); n != 2 {
		t.Errorf("%d sessions", n)
	}
	if err := s.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
}
