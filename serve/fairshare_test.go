package serve

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestSharesHoldBackOnlyExpensiveSessions: a session is held back only
// when it used more than its share of the guard lately while others used
// it too, and its steps cost more than twice theirs; the wait is what its
// use needs to decay to the share.
func TestSharesHoldBackOnlyExpensiveSessions(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newShares(0.25)
	s.charge(t0, "alone", 9)
	if w := s.wait(t0, "alone"); w != 0 {
		t.Errorf("a session alone waits %v", w)
	}
	s = newShares(0.25)
	for i := 0; i < 30; i++ {
		s.charge(t0, "cheap", 0.3) // 9 s of 0.3 s steps
	}
	s.charge(t0, "long", 1.5)
	if w := s.wait(t0, "long"); w != 0 {
		t.Errorf("within its share (1.5 s of 2.5), the long session waits %v", w)
	}
	s.charge(t0, "long", 1.5)
	want := time.Duration(10 * math.Log(3/2.5) * float64(time.Second))
	if w := s.wait(t0, "long"); (w - want).Abs() > time.Millisecond {
		t.Errorf("the long session waits %v, want %v (its 3 s to decay to 2.5 s)", w, want)
	}
	if w := s.wait(t0, "cheap"); w != 0 {
		t.Errorf("the cheap session (most of the guard, cheap steps) waits %v", w)
	}
	if w := s.wait(t0.Add(want), "long"); w > time.Millisecond {
		t.Errorf("after its wait, the long session waits %v more", w)
	}
	if w := newSharesWith(1, "long", "cheap").wait(t0, "long"); w != 0 {
		t.Errorf("with max_session_share 1, %v", w)
	}
}

func newSharesWith(limit float64, ids ...string) *shares {
	s := newShares(limit)
	for i, id := range ids {
		s.charge(time.Now(), id, float64(10*(len(ids)-i)))
	}
	return s
}

// TestOverShareIs429: a session held back longer than its step's deadline
// is answered 429 over_share with Retry-After, and nothing runs.
func TestOverShareIs429(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DeadlineS = 1
	ts := newTestServer(t, cfg, false)
	long, cheap := ts.create("long"), ts.create("cheap")
	now := time.Now()
	for i := 0; i < 10; i++ {
		ts.srv.batcher.shares.charge(now, cheap, 0.3)
	}
	ts.srv.batcher.shares.charge(now, long, 9)
	code, body := ts.do("POST", "/v1/sessions/"+long+"/assess", assessBody("read_file", `{}`, nil))
	if e := decode[ErrorBody](t, body).Error; code != 429 || e.Code != "over_share" || !strings.Contains(e.Message, "serve.max_session_share (0.25)") {
		t.Errorf("%d %s", code, body)
	}
	if code, body := ts.do("POST", "/v1/sessions/"+cheap+"/assess", assessBody("read_file", `{}`, nil)); code != 200 {
		t.Errorf("the cheap session: %d %s", code, body)
	}
}
