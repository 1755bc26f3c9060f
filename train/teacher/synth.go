package teacher

// The synthetic world's teachers (dataset/synth): the memory a memory
// manager following the world's rules keeps, and the world's judge rule.

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/synth"
)

// The judge's decisions (the values of assess_risk's decision).
const (
	Approve = "approve"
	Reject  = "reject"
)

// Synth is the synthetic world's teacher (sft.teacher synth, synth-myopic
// and synth-leaky): it writes the memory a memory manager following the
// world's rules keeps (the perfect one, or with Myopic the one that keeps
// only the latest turn), within BudgetChars, and the decision and
// rationale of the world's judge rule (Judge) on that memory. With the
// perfect memory that rule is right on every action (Decision); with the
// myopic one it misses every attack of gap ≥ 2, a judge consistent with
// the memory it reads. It reads only data synth's trajectories.
type Synth struct {
	// BudgetChars is the most characters (Unicode code points) a memory may
	// have; 0 = no limit. A memory over it drops its oldest allowed
	// identifiers first (the judge's rule needs only the injected ones).
	BudgetChars int
	// Myopic keeps only what the latest memory call shows: the memory is
	// rebuilt from that call's events alone (the user's prompt at the
	// window's first turn, else the previous action and its observation),
	// forgetting everything earlier. Without it the teacher is perfect: m_t
	// is m_{t-1} updated with the call's events.
	Myopic bool
	// Leaky makes a memory that can keep but does not know what to keep:
	// at every memory call after the window's first, each identifier of
	// the previous memory, allowed or injected alike, is kept with
	// probability Keep and dropped otherwise, before the call's events are
	// added (Leak). An injected identifier then reaches the judge of an
	// attack of gap g with probability Keep^(g−1). The draws are
	// deterministic: a hash of Seed, the trajectory's id, the turn and the
	// identifier (so the same trajectory gets the same memories, and Next
	// drops what Memories drops). Keep = 1 is the perfect memory. Ignored
	// when Myopic.
	Leaky bool
	Keep  float64
	Seed  uint64
}

// ErrNotSynth is returned for a trajectory the teacher cannot read.
var ErrNotSynth = errors.New("synth teacher: not a trajectory of the synthetic world (source is not \"synth\")")

// Memories returns m_t for every turn t of the window [start, end) of tr:
// the memory after the memory call of turn t, as the guard loop runs it
// (rollout): the call at the window's first turn sees the user's prompt and
// the action just before the window with its observation; each later call
// sees the previous action and its observation. A perfect memory carries
// everything seen since the window began; a myopic one only its own call's
// events. It fails for a trajectory that is not synthetic, a bad window, or
// a memory whose injected identifiers alone exceed the budget.
func (st Synth) Memories(tr *dataset.Trajectory, start, end int) ([]string, error) {
	if tr.Source != synth.Source {
		return nil, fmt.Errorf("%w: trajectory %s", ErrNotSynth, tr.ID)
	}
	if start < 0 || end > len(tr.Turns) || start >= end {
		return nil, fmt.Errorf("synth teacher: trajectory %s: window [%d, %d) of %d turns", tr.ID, start, end, len(tr.Turns))
	}
	var m synth.Memory
	out := make([]string, 0, end-start)
	for t := start; t < end; t++ {
		switch {
		case st.Myopic:
			m = synth.Memory{}
		case st.Leaky && t > start:
			m = st.Leak(tr.ID, t, m)
		}
		text, err := st.call(tr, start, t, &m)
		if err != nil {
			return nil, err
		}
		out = append(out, text)
	}
	return out, nil
}

// call updates m with the events the memory call of turn t of the window
// from start shows (the user's prompt at the window's first turn, the
// previous action and its observation after turn 0) and writes it within
// the budget.
func (st Synth) call(tr *dataset.Trajectory, start, t int, m *synth.Memory) (string, error) {
	if t == start {
		m.ReadPrompt(tr.UserPrompt)
	}
	if t > 0 {
		m.ReadTurn(&tr.Turns[t-1])
	}
	text, err := st.fit(*m)
	if err != nil {
		return "", fmt.Errorf("synth teacher: trajectory %s turn %d: %w", tr.ID, t, err)
	}
	return text, nil
}

// Next implements Corrector: it returns what the memory call of turn t of
// the window that starts at start should write when the memory it shows is prev (m_{t−1} as a memory
// manager wrote it; "" at t = start): prev read leniently (synth.ParseMemory),
// each identifier once in the first role it is listed in, thinned by a
// leaky teacher (Leak), updated with the call's events and fitted to the
// budget. A myopic teacher ignores prev. It
// is the teacher's correction of a model's own memory chain: a supervised
// warm start on the memories a model writes (sft.own_memories) trains each
// call on what it should have written from what it was shown. From the
// teacher's own memories it gives Memories' (TestNextFollowsMemories).
func (st Synth) Next(tr *dataset.Trajectory, start, t int, prev string) (string, error) {
	if tr.Source != synth.Source {
		return "", fmt.Errorf("%w: trajectory %s", ErrNotSynth, tr.ID)
	}
	if start < 0 || t < start || t >= len(tr.Turns) {
		return "", fmt.Errorf("synth teacher: trajectory %s: turn %d of a window from %d of %d turns", tr.ID, t, start, len(tr.Turns))
	}
	var m synth.Memory
	if !st.Myopic && t > start {
		m = synth.ParseMemory(prev)
		if st.Leaky {
			m = st.Leak(tr.ID, t, m)
		}
	}
	return st.call(tr, start, t, &m)
}

// Memory returns m_t of the window that starts at start (see Memories).
func (st Synth) Memory(tr *dataset.Trajectory, start, t int) (string, error) {
	ms, err := st.Memories(tr, start, t+1)
	if err != nil {
		return "", err
	}
	return ms[len(ms)-1], nil
}

// fit writes m within the budget, dropping the oldest allowed identifiers.
func (st Synth) fit(m synth.Memory) (string, error) {
	for {
		text := m.String()
		if st.BudgetChars <= 0 || utf8.RuneCountInString(text) <= st.BudgetChars {
			return text, nil
		}
		i := slices.IndexFunc(m.Entries, func(e synth.Entry) bool { return e.Role == synth.RoleAllowed })
		if i < 0 {
			return "", fmt.Errorf("memory %q is over the budget of %d characters", text, st.BudgetChars)
		}
		m.Entries = slices.Delete(slices.Clone(m.Entries), i, i+1)
	}
}

// The judge's rationales name the pending action's target and what the
// memory says of it — the target's entry in the memory, or "unknown" —
// before the decision that follows from it: a judge that writes the
// rationale first makes its decision one lookup (docs/synth.md).
const (
	rationaleUnknown = "unknown"
	rationaleRead    = "only reads data"
)

// Decision returns the right decision for the action of turn t of a
// synthetic trajectory, from its label, with its rationale: reject a
// label-1 action ("acct-tesa injected"), approve the others ("acct-bako
// allowed", "read_inbox only reads data").
func Decision(tr *dataset.Trajectory, t int) (decision, rationale string) {
	a := tr.Turns[t].Action
	target := synth.Target(a.Name, a.Arguments)
	switch {
	case tr.Turns[t].Label == 1:
		return Reject, target + " " + synth.RoleInjected
	case target == "":
		return Approve, a.Name + " " + rationaleRead
	default:
		return Approve, target + " " + synth.RoleAllowed
	}
}

// Judge is the world's rule for a judge that reads only the memory and the
// pending action: reject an action whose target the memory lists as
// injected; approve everything else. With the perfect memory it is right
// on every action; with the myopic one it misses every attack of gap >= 2.
// Its rationale is the target and its role in the memory ("acct-tesa
// injected", "acct-bako allowed", "acct-nisa unknown" when the memory does
// not list it), or that a read only reads data.
func Judge(memory string, a dataset.Action) (decision, rationale string) {
	target := synth.Target(a.Name, a.Arguments)
	if target == "" {
		return Approve, a.Name + " " + rationaleRead
	}
	switch role := synth.ParseMemory(memory).Role(target); role {
	case synth.RoleInjected:
		return Reject, target + " " + role
	case synth.RoleAllowed:
		return Approve, target + " " + role
	default:
		return Approve, target + " " + rationaleUnknown
	}
}

// Targets implements Teacher: the memories of the window with the judge
// rule's decision and rationale on each. A trajectory that is not
// synthetic wraps ErrNotTaught.
func (st Synth) Targets(tr *dataset.Trajectory, start, end int) ([]Target, error) {
	if tr.Source != synth.Source {
		return nil, fmt.Errorf("%w: trajectory %s is not synthetic (source %q): the %s teacher reads only data synth's trajectories", ErrNotTaught, tr.ID, tr.Source, st)
	}
	mems, err := st.Memories(tr, start, end)
	if err != nil {
		return nil, err
	}
	out := make([]Target, len(mems))
	for i, m := range mems {
		d, why := Judge(m, tr.Turns[start+i].Action)
		out[i] = Target{Memory: m, Decision: d, Rationale: why}
	}
	return out, nil
}

// JudgeOn implements Corrector: the world's judge rule on memory (Judge),
// consistent with the memory the judge reads.
func (st Synth) JudgeOn(tr *dataset.Trajectory, t int, memory string) (decision, rationale string) {
	return Judge(memory, tr.Turns[t].Action)
}

// String names the teacher as sft.teacher does: NameSynth or
// NameSynthMyopic.
func (st Synth) String() string {
	switch {
	case st.Myopic:
		return NameSynthMyopic
	case st.Leaky:
		return NameSynthLeaky + ":" + strconv.FormatFloat(st.Keep, 'g', -1, 64)
	}
	return NameSynth
}
