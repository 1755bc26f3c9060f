package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mageguard/mageguard/dataset"
)

// TestCommitStepsSkipsStaleSteps: a step whose session moved on or is gone
// is left out; the others of the batch are stored in the same commit.
func TestCommitStepsSkipsStaleSteps(t *testing.T) {
	forEachStore(t, testCommitStepsSkipsStaleSteps)
}

func testCommitStepsSkipsStaleSteps(t *testing.T, s Store) {
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
	if n := s.Usage().Sessions; n != 2 {
		t.Errorf("%d sessions", n)
	}
	if err := s.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after delete: %v", err)
	}
}

// forEachStore runs f on a new Bolt and a new Memory store: both must
// answer alike.
func forEachStore(t *testing.T, f func(t *testing.T, s Store)) {
	t.Run("bolt", func(t *testing.T) { f(t, openTestBolt(t, t.TempDir())) })
	t.Run("memory", func(t *testing.T) { f(t, NewMemory()) })
}

// step is step n of a test session.
func step(n int, decision string) Step {
	return Step{Step: n, Action: dataset.Action{Name: "f", Arguments: []byte(`{"n": 1}`)}, Memory: "m", MemoryVersion: n + 1, Decision: decision,
		DecidedAt: time.Date(2026, 1, 1, 0, 0, n, 0, time.UTC)}
}

// TestUsageCountsWhatIsStored: the usage after creates, steps, a resume
// and a delete is the sum of the JSON of what is left (counted here from
// what Get returns), the same in Bolt and Memory, and in Bolt the same
// counted afresh at open.
func TestUsageCountsWhatIsStored(t *testing.T) {
	var got []Usage
	dir := t.TempDir()
	disk := openTestBolt(t, dir)
	for _, s := range []Store{disk, NewMemory()} {
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for i, owner := range []string{"a", "a", "b"} {
			sess := &Session{ID: fmt.Sprintf("s_%d", i), Owner: owner, UserPrompt: strings.Repeat("p", 100*(i+1)), CreatedAt: at, Status: StatusActive}
			if err := s.Create(sess); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{"s_0", "s_1", "s_2"} {
			if errs, err := s.CommitSteps([]Commit{{id, step(0, DecisionBlock)}}); err != nil || errs[0] != nil {
				t.Fatal(err, errs)
			}
		}
		if _, err := s.Resume("s_1", at); err != nil {
			t.Fatal(err)
		}
		if err := s.SetResult("s_1", 0, "the call's result"); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete("s_0"); err != nil {
			t.Fatal(err)
		}
		want := Usage{}
		perOwner := map[string]Usage{}
		for _, id := range []string{"s_1", "s_2"} {
			sess, steps, err := s.GetWithSteps(id)
			if err != nil {
				t.Fatal(err)
			}
			entry, _ := json.Marshal(sess)
			size := int64(len(id) + len(entry))
			for _, st := range steps {
				v, _ := json.Marshal(&st)
				size += int64(stepKeySize + len(v))
			}
			want.Sessions++
			want.Bytes += size
			perOwner[sess.Owner] = Usage{Sessions: perOwner[sess.Owner].Sessions + 1, Bytes: perOwner[sess.Owner].Bytes + size}
		}
		if u := s.Usage(); u != want {
			t.Errorf("%T: usage %+v, want %+v", s, u, want)
		}
		for _, owner := range []string{"a", "b"} {
			if u := s.UsageOf(owner); u != perOwner[owner] {
				t.Errorf("%T: usage of %s %+v, want %+v", s, owner, u, perOwner[owner])
			}
		}
		got = append(got, s.Usage())
	}
	if got[0] != got[1] {
		t.Errorf("bolt %+v, memory %+v", got[0], got[1])
	}
	disk.Close()
	again := openTestBolt(t, dir)
	if u := again.Usage(); u != got[0] {
		t.Errorf("counted at open %+v, kept while writing %+v", u, got[0])
	}
	if a, b := again.UsageOf("a"), disk.UsageOf("a"); a != b {
		t.Errorf("a's usage counted at open %+v, kept while writing %+v", a, b)
	}
}

// TestListPagesByOwner: an owner's sessions, and all sessions, come
// oldest first (ties by id) in pages of the limit, each page after the
// previous one's cursor, the last with no cursor; a session created
// between two pages, older than the cursor, does not shift the next; a
// cursor no page gave is ErrBadCursor.
func TestListPagesByOwner(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		// id, owner, creation second: s_3 and s_4 share a second (ties by id).
		for _, c := range []struct {
			id, owner string
			sec       int
		}{{"s_5", "a", 1}, {"s_1", "b", 2}, {"s_4", "a", 3}, {"s_3", "a", 3}, {"s_2", "b", 4}, {"s_6", "a", 5}} {
			if err := s.Create(&Session{ID: c.id, Owner: c.owner, CreatedAt: t0.Add(time.Duration(c.sec) * time.Second), Status: StatusActive}); err != nil {
				t.Fatal(err)
			}
		}
		pages := func(q ListQuery) [][]string {
			var out [][]string
			for i := 0; i < 10; i++ {
				p, err := s.List(q)
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, sess := range p.Sessions {
					ids = append(ids, sess.ID)
				}
				out = append(out, ids)
				if p.Next == "" {
					return out
				}
				q.Cursor = p.Next
			}
			t.Fatal("no last page")
			return nil
		}
		for _, c := range []struct {
			q    ListQuery
			want string
		}{
			{ListQuery{Owner: "a", Limit: 2}, "[[s_5 s_3] [s_4 s_6]]"},
			{ListQuery{Owner: "a", Limit: 3}, "[[s_5 s_3 s_4] [s_6]]"},
			{ListQuery{Owner: "b", Limit: 100}, "[[s_1 s_2]]"},
			{ListQuery{Owner: "c", Limit: 100}, "[[]]"},
			{ListQuery{All: true, Limit: 4}, "[[s_5 s_1 s_3 s_4] [s_2 s_6]]"},
		} {
			if got := fmt.Sprint(pages(c.q)); got != c.want {
				t.Errorf("%+v: %s, want %s", c.q, got, c.want)
			}
		}
		p, err := s.List(ListQuery{Owner: "a", Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Create(&Session{ID: "s_0", Owner: "a", CreatedAt: t0, Status: StatusActive}); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete("s_4"); err != nil {
			t.Fatal(err)
		}
		if next, err := s.List(ListQuery{Owner: "a", Limit: 2, Cursor: p.Next}); err != nil || len(next.Sessions) != 1 || next.Sessions[0].ID != "s_6" {
			t.Errorf("the page after %s: %+v %v", p.Next, next, err)
		}
		for _, bad := range []string{"!", "AAAA", strings.Repeat("A", 400)} {
			if _, err := s.List(ListQuery{Owner: "a", Limit: 2, Cursor: bad}); !errors.Is(err, ErrBadCursor) {
				t.Errorf("cursor %q: %v", bad, err)
			}
		}
	})
}

// TestSetLabel: a label set on a step is read back with the step, the
// last one stands, the usage grows by the bytes the step's entry grew;
// a missing session is ErrNotFound, a missing step ErrNoStep.
func TestSetLabel(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		if err := s.Create(&Session{ID: "s_a", Owner: "a", Status: StatusActive}); err != nil {
			t.Fatal(err)
		}
		for n := range 2 {
			if errs, err := s.CommitSteps([]Commit{{"s_a", step(n, DecisionAllow)}}); err != nil || errs[0] != nil {
				t.Fatal(err, errs)
			}
		}
		at := time.Date(2026, 2, 3, 4, 5, 6, 0, time.FixedZone("x", 3600))
		before := s.Usage()
		if err := s.SetLabel("s_a", 1, StepLabel{Label: 0, Note: "a false alarm", By: "alice", At: at}); err != nil {
			t.Fatal(err)
		}
		if err := s.SetLabel("s_a", 1, StepLabel{Label: 1, By: "bob", At: at}); err != nil {
			t.Fatal(err)
		}
		_, steps, err := s.GetWithSteps("s_a")
		if err != nil {
			t.Fatal(err)
		}
		want := StepLabel{Label: 1, By: "bob", At: at.UTC()}
		if steps[0].Label != nil || steps[1].Label == nil || *steps[1].Label != want {
			t.Errorf("labels %+v %+v, want none and %+v", steps[0].Label, steps[1].Label, want)
		}
		// {"label":1,"by":"bob","at":"2026-02-03T03:05:06Z"} and its comma.
		grow := int64(len(`,"label":{"label":1,"by":"bob","at":"2026-02-03T03:05:06Z"}`))
		if u := s.Usage(); u.Bytes != before.Bytes+grow || s.UsageOf("a") != u {
			t.Errorf("usage %+v after the label, %+v before (+%d)", u, before, grow)
		}
		for _, c := range []struct {
			id   string
			n    int
			want error
		}{{"s_b", 0, ErrNotFound}, {"s_a", 2, ErrNoStep}, {"s_a", -1, ErrNoStep}} {
			if err := s.SetLabel(c.id, c.n, want); !errors.Is(err, c.want) {
				t.Errorf("%s step %d: %v, want %v", c.id, c.n, err, c.want)
			}
			if _, err := s.GetStep(c.id, c.n); !errors.Is(err, c.want) {
				t.Errorf("get %s step %d: %v, want %v", c.id, c.n, err, c.want)
			}
		}
	})
}

// TestSetResult: a step's result is recorded and replaced, its bytes
// counted; growth past max_state_bytes is refused and leaves the step as
// it was; an unknown session or step is an error.
func TestSetResult(t *testing.T) {
	forEachStore(t, func(t *testing.T, s Store) {
		if err := s.Create(&Session{ID: "s_a", Owner: "a", Status: StatusActive}); err != nil {
			t.Fatal(err)
		}
		if errs, err := s.CommitSteps([]Commit{{"s_a", step(0, DecisionAllow)}}); err != nil || errs[0] != nil {
			t.Fatal(err, errs)
		}
		before := s.Usage()
		for _, r := range []string{"a long first result", "ok"} {
			if err := s.SetResult("s_a", 0, r); err != nil {
				t.Fatal(err)
			}
		}
		st, err := s.GetStep("s_a", 0)
		if err != nil {
			t.Fatal(err)
		}
		if st.Result == nil || *st.Result != "ok" {
			t.Errorf("result %v, want ok", st.Result)
		}
		grow := int64(len(`,"result":"ok"`))
		if u := s.Usage(); u.Bytes != before.Bytes+grow || s.UsageOf("a") != u {
			t.Errorf("usage %+v after the result, %+v before (+%d)", u, before, grow)
		}
		s.SetLimits(Limits{MaxBytes: s.Usage().Bytes + 5})
		var le *LimitError
		if err := s.SetResult("s_a", 0, "a result more than 5 bytes longer"); !errors.As(err, &le) || le.Key != "max_state_bytes" {
			t.Errorf("past max_state_bytes: %v", err)
		}
		if st, _ := s.GetStep("s_a", 0); st.Result == nil || *st.Result != "ok" {
			t.Errorf("a refused result changed the step: %v", st.Result)
		}
		if err := s.SetResult("s_a", 0, "k"); err != nil {
			t.Errorf("a shorter result past the limit: %v", err)
		}
		for _, c := range []struct {
			id   string
			n    int
			want error
		}{{"s_b", 0, ErrNotFound}, {"s_a", 1, ErrNoStep}, {"s_a", -1, ErrNoStep}} {
			if err := s.SetResult(c.id, c.n, "x"); !errors.Is(err, c.want) {
				t.Errorf("%s step %d: %v, want %v", c.id, c.n, err, c.want)
			}
		}
	})
}

// TestOpenReadOnly: a read-only open fails while a writer holds the file,
// reads what the writer stored once it is closed, shares the file with
// another reader, and refuses writes; a missing file is an error, not a
// new database.
func TestOpenReadOnly(t *testing.T) {
	dir := t.TempDir()
	w := openTestBolt(t, dir)
	if err := w.Create(&Session{ID: "s_a", Owner: "a", Status: StatusActive}); err != nil {
		t.Fatal(err)
	}
	ro := Options{LockWait: 50 * time.Millisecond, ReadOnly: true}
	if _, err := Open(dir, ro); err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("read-only beside a writer: %v", err)
	}
	w.Close()
	r1, err := Open(dir, ro)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := Open(dir, ro)
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	defer r2.Close()
	if sess, err := r2.Get("s_a"); err != nil || sess.Owner != "a" || r1.Usage() != r2.Usage() || r1.Usage().Sessions != 1 {
		t.Errorf("read %+v %v, usage %+v", sess, err, r1.Usage())
	}
	if err := r1.Delete("s_a"); err == nil {
		t.Error("a read-only store deleted")
	}
	if _, err := Open(t.TempDir(), ro); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only on an empty directory: %v", err)
	}
}
