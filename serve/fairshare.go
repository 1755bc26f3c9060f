package serve

// Fair shares of the guard. The worker is one: a batch runs while the
// steps queued behind it wait, and a step's cost grows with its prompt —
// a session sending long actions and messages makes each of its steps
// several times as long as a normal one (within serve.max_prompt_tokens),
// and long prompts do not batch well with short ones. Short steps batch
// together cheaply, so it is the sessions of expensive steps that delay
// the others. Each session's recent use of the guard is counted — the
// seconds of the batches it was in, split by prompt tokens, and its steps,
// both decaying with a time constant of shareWindow — and a session whose
// steps cost more than twice those of the other sessions, while they use
// the guard too, may take at most serve.max_session_share of it: above
// that, its next step waits before it joins the queue, until its use has
// decayed to that share. Alone, or with steps like the others', a session
// is never held back. An agent's sessions are counted together, as one
// (Server.shareKey): spreading its steps over sessions gains an agent
// nothing. Here a "session" is what the use is counted under.

import (
	"math"
	"sync"
	"time"
)

// shareWindow is the time constant of a session's counted use: a second
// of use counts e^(−t/shareWindow) after t.
const shareWindow = 10 * time.Second

// decayed is a quantity that decays with time constant shareWindow.
type decayed struct {
	v  float64
	at time.Time
}

func (d decayed) value(now time.Time) float64 {
	return d.v * math.Exp(-now.Sub(d.at).Seconds()/shareWindow.Seconds())
}

func (d *decayed) add(now time.Time, x float64) {
	d.v, d.at = d.value(now)+x, now
}

// shares counts the sessions' use of the guard. Its methods are safe for
// concurrent use.
type shares struct {
	limit float64 // serve.max_session_share (1: no limit)

	mu    sync.Mutex
	use   map[string]*sessionUse // per session
	total sessionUse             // all sessions'
}

// sessionUse is a session's recent use of the guard: seconds and steps,
// decayed.
type sessionUse struct{ seconds, steps decayed }

func newShares(limit float64) *shares {
	return &shares{limit: limit, use: map[string]*sessionUse{}}
}

// charge counts a step of session id and its seconds of guard time.
func (s *shares) charge(now time.Time, id string, seconds float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.use[id]
	if u == nil {
		u = &sessionUse{}
		s.use[id] = u
	}
	for _, x := range []*sessionUse{u, &s.total} {
		x.seconds.add(now, seconds)
		x.steps.add(now, 1)
	}
	if len(s.use) > 64 { // forget the sessions whose use has decayed away
		for k, u := range s.use {
			if u.steps.value(now) < 1e-3 {
				delete(s.use, k)
			}
		}
	}
}

// wait is how long session id's next step must wait before it joins the
// queue: 0 while its use is within the limit, while no other session used
// the guard recently (a hundredth of the window), or while its steps cost
// at most twice the others'.
func (s *shares) wait(now time.Time, id string) time.Duration {
	if s.limit >= 1 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.use[id]
	if u == nil {
		return 0
	}
	window := shareWindow.Seconds()
	mine, mySteps := u.seconds.value(now), u.steps.value(now)
	others, otherSteps := s.total.seconds.value(now)-mine, s.total.steps.value(now)-mySteps
	if mine <= s.limit*window || others < window/100 || otherSteps < 1e-3 || mine/mySteps <= 2*others/otherSteps {
		return 0
	}
	return time.Duration(window * math.Log(mine/(s.limit*window)) * float64(time.Second))
}
