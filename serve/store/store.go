// Package store keeps the guard service's sessions: each agent task's
// guard state and its answered steps. The server (package serve) uses
// only the Store interface; Bolt keeps the sessions in one bbolt file
// (DIR/sessions.db) and checks it for damage, Memory keeps them in memory
// (tests, and anything that needs no persistence).
//
// The interface is the seam for a store shared by several servers: every
// method that reads or writes takes the session's id and returns
// ErrNotFound for one that is not there; CommitSteps refuses a step whose
// session moved on meanwhile (ErrConflict), so two servers cannot both
// append step n; and limits are the store's to enforce, in the
// transaction that writes. What a shared store would add (claims that
// span servers) lives above it.
package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mageguard/mageguard/dataset"
)

// Store is what the server keeps of its sessions. Implementations are
// safe for concurrent use.
type Store interface {
	// Create stores a new session; its id must be new. Past a limit it
	// returns a *LimitError.
	Create(sess *Session) error
	// Get returns a session without its steps.
	Get(id string) (*Session, error)
	// GetWithSteps returns a session and its steps in order, read
	// together.
	GetWithSteps(id string) (*Session, []Step, error)
	// GetStep returns step n of a session.
	GetStep(id string, n int) (*Step, error)
	// CommitSteps stores a batch's steps together (see Bolt.CommitSteps):
	// the per-step errors are ErrNotFound, ErrConflict or a *LimitError
	// for a step left out; the error is the write's own.
	CommitSteps(cs []Commit) ([]error, error)
	// Resume sets a blocked session active again and records when.
	Resume(id string, at time.Time) (*Session, error)
	// SetLabel sets an operator's label on step n of a session, in place
	// of any label it had (ErrNotFound: no such session; ErrNoStep: no
	// such step). A label counts in the usage but passes no limit: it is
	// an operator's act, and small.
	SetLabel(sessionID string, step int, l StepLabel) error
	// SetResult records what step n's action returned (Step.Result), in
	// place of any result it had (ErrNotFound, ErrNoStep as SetLabel). It
	// passes the byte limits as a step does (a *LimitError).
	SetResult(sessionID string, step int, result string) error
	// Delete removes a session and its steps.
	Delete(id string) error
	// List returns a page of sessions, oldest first.
	List(q ListQuery) (Page, error)
	// Idle returns the ids of the sessions last created, stepped or
	// resumed before t; DeleteIdle deletes one if it still is, and
	// reports whether it did.
	Idle(before time.Time) ([]string, error)
	DeleteIdle(id string, before time.Time) (bool, error)
	// Usage is what the store holds, UsageOf what one owner's sessions
	// hold; SetLimits sets the bounds that Create and CommitSteps enforce.
	Usage() Usage
	UsageOf(owner string) Usage
	SetLimits(l Limits)
	// Damaged returns the damage found since the store was opened (a
	// *DamageError: every call then fails with it), or nil.
	Damaged() error
	Close() error
}

// Errors of a store.
var (
	ErrNotFound = errors.New("no such session")
	ErrConflict = errors.New("the session changed meanwhile")
	ErrNoStep   = errors.New("no such step")
)

// Session statuses.
const (
	StatusActive  = "active"  // assess calls run
	StatusBlocked = "blocked" // a step was blocked: assess calls get 409 until a resume
)

// Decisions of a step: a step decided DecisionBlock blocks its session.
const (
	DecisionAllow = "allow"
	DecisionBlock = "block"
)

// Tool is an agent tool declared at a session's creation.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// Session is one agent task's guard state as stored.
type Session struct {
	ID            string          `json:"id"`
	Owner         string          `json:"owner"` // the name of the token that created it ("" without authentication)
	UserPrompt    string          `json:"user_prompt"`
	Tools         []Tool          `json:"tools"`
	CreatedAt     time.Time       `json:"created_at"`
	UpdatedAt     time.Time       `json:"updated_at"`     // the last create, step or resume: what serve.session_idle_s counts from
	Status        string          `json:"status"`         // StatusActive or StatusBlocked
	Memory        string          `json:"memory"`         // m_t after the last step ("" before the first)
	MemoryVersion int             `json:"memory_version"` // memory updates so far: one per step
	StepCount     int             `json:"step_count"`     // steps answered
	LastAction    *dataset.Action `json:"last_action"`    // the last step's action, which the next memory call shows with its observation
	Resumes       []time.Time     `json:"resumes"`        // when the operator resumed it after a block
}

// Step is one answered step as stored.
type Step struct {
	Step          int            `json:"step"`           // from 0
	Action        dataset.Action `json:"action"`         // the pending action assessed
	Observation   *string        `json:"observation"`    // what the agent reported of the previous action (null: nothing)
	UserMessages  []string       `json:"user_messages"`  // user messages that arrived since the previous step
	Memory        string         `json:"memory"`         // m_t, the memory the judge read
	MemoryVersion int            `json:"memory_version"` // the session's memory version after this step
	MemoryParsed  bool           `json:"memory_parsed"`  // false: a format violation, the memory stayed m_{t-1}
	Decision      string         `json:"decision"`       // "allow" or "block" (the answer)
	Judge         string         `json:"judge"`          // the judge's decision after the format fallback: "approve" or "reject"
	JudgeParsed   bool           `json:"judge_parsed"`   // false: a format violation, the judge fell back to reject
	Score         float64        `json:"score"`          // p(reject) from the decision token (1 on a violation)
	ScoreExact    bool           `json:"score_exact"`    // false: the score is the decision itself (no log-probs)
	Rationale     string         `json:"rationale"`      // the judge's rationale
	Tokens        int            `json:"tokens"`         // guard tokens of the step: prompt + generated, both calls
	LatencyMS     int64          `json:"latency_ms"`     // from the request's arrival to its decision
	DecidedAt     time.Time      `json:"decided_at"`
	Label         *StepLabel     `json:"label,omitempty"` // an operator's label (nil: none)
	// Result is what this step's action returned, when the agent (or the
	// MCP gateway, which runs the call) recorded it; nil: not recorded, and
	// the next step's Observation is the only record of it (none for the
	// last step).
	Result *string `json:"result,omitempty"`
}

// StepLabel is an operator's label on a step: whether its action was
// malicious (1) or benign (0), who said so and when. The last label given
// stands.
type StepLabel struct {
	Label int       `json:"label"`          // 1: the action was malicious (an injection's); 0: benign
	Note  string    `json:"note,omitempty"` // the operator's words
	By    string    `json:"by"`             // the operator's name (a token's, or a local user's)
	At    time.Time `json:"at"`
}

// Commit is one answered step to store: the step, and the session's
// state after it.
type Commit struct {
	ID   string
	Step Step
}

// ListQuery says which sessions List returns.
type ListQuery struct {
	Owner string // the sessions of this owner…
	All   bool   // …or, when set, every owner's
	Limit int    // at most this many (at least 1)
	// Cursor is a previous page's Next: the page starts after it. A
	// cursor of one query given to another lists from its position all
	// the same (it names a position in time, not a session).
	Cursor string
}

// Page is a page of sessions, oldest first (ties by id), without steps.
type Page struct {
	Sessions []*Session
	Next     string // the cursor of the next page ("": none)
}

// DBFile is the database's file name under the state directory.
const DBFile = "sessions.db"

// advance is a session after step st: its memory, memory version, step
// count, last action, the time of the step and, for a block, the blocked
// status.
func advance(sess *Session, st *Step) {
	sess.Memory, sess.MemoryVersion = st.Memory, st.MemoryVersion
	sess.StepCount = st.Step + 1
	action := st.Action
	sess.LastAction = &action
	sess.UpdatedAt = st.DecidedAt
	if st.Decision == DecisionBlock {
		sess.Status = StatusBlocked
	}
}

// commitSteps appends the steps of a batch to their sessions inside one
// write of a store (its transaction, or its lock), as CommitSteps says:
// get reads a session and the bytes its entry takes; put stores step n of
// session id and the session's new entry, both as JSON; u counts the
// bytes they add. A step left out gets its error at its index in errs
// (ErrNotFound from get, ErrConflict, or a *LimitError under l), a step
// stored nil. The error returned ends the write: encoding's or put's.
func commitSteps(cs []Commit, errs []error, l Limits, u *tally,
	get func(id string) (*Session, int, error),
	put func(id string, n int, step, entry []byte) error) error {
	clear(errs)
	for i, c := range cs {
		sess, old, err := get(c.ID)
		if err != nil {
			errs[i] = err
			continue
		}
		if sess.StepCount != c.Step.Step {
			errs[i] = ErrConflict
			continue
		}
		advance(sess, &c.Step)
		step, err := json.Marshal(&c.Step)
		if err != nil {
			return err
		}
		entry, err := json.Marshal(sess)
		if err != nil {
			return err
		}
		grow := int64(stepKeySize + len(step) + len(c.ID) + len(entry) - old)
		if err := u.admit(l, sess.Owner, 0, grow); err != nil {
			errs[i] = err
			continue
		}
		if err := put(c.ID, c.Step.Step, step, entry); err != nil {
			return err
		}
		u.add(sess.Owner, 0, grow)
	}
	return nil
}

// resume sets a blocked session active again, recording when.
func resume(sess *Session, at time.Time) error {
	if sess.Status != StatusBlocked {
		return fmt.Errorf("session %s is %s, not blocked", sess.ID, sess.Status)
	}
	sess.Status = StatusActive
	sess.Resumes = append(sess.Resumes, at.UTC())
	sess.UpdatedAt = at.UTC()
	return nil
}

// edited is a stored step (JSON) changed by edit.
func edited(step []byte, edit func(*Step)) ([]byte, error) {
	var st Step
	if err := json.Unmarshal(step, &st); err != nil {
		return nil, err
	}
	edit(&st)
	return json.Marshal(&st)
}

// withLabel sets label l (its time in UTC) on a step.
func withLabel(l StepLabel) func(*Step) {
	l.At = l.At.UTC()
	return func(st *Step) { st.Label = &l }
}

// withResult sets the result of a step's action.
func withResult(result string) func(*Step) {
	return func(st *Step) { st.Result = &result }
}
