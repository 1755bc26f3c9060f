package serve

// Sessions live in one bbolt file, DIR/sessions.db. bbolt rather than
// SQLite: sessions are looked up by id and steps appended in order, which a
// key-value store with nested buckets does without a query language;
// bbolt is pure Go and small (SQLite in pure Go is a transpiled C library
// many times its size); every read-write transaction is one fsync'd commit
// (a step's memory and decision are on disk before its answer is sent, and
// a batch's steps share one commit); and it takes an exclusive flock on
// the file, so a second server on the same --state fails at once.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mageguard/mageguard/dataset"
)

// DBFile is the database's file name under the state directory.
const DBFile = "sessions.db"

// Session statuses.
const (
	StatusActive  = "active"  // assess calls run
	StatusBlocked = "blocked" // a step was blocked: assess calls get 409 until a resume
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
}

// Store is the sessions database.
type Store struct {
	db   *bolt.DB
	path string
}

var (
	sessionsBucket = []byte("sessions")
	stepsBucket    = []byte("steps")
)

// Errors of the store.
var (
	ErrNotFound = errors.New("no such session")
	ErrConflict = errors.New("the session changed meanwhile")
)

// OpenStore opens (creating if needed) DIR/sessions.db. A second process
// on the same file fails within lockWait.
func OpenStore(dir string, lockWait time.Duration) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("serve: state directory: %w", err)
	}
	path := filepath.Join(dir, DBFile)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("serve: %s is locked by another process (another mageguard serve on the same --state?)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("serve: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{sessionsBucket, stepsBucket} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("serve: init %s: %w", path, err)
	}
	return &Store{db: db, path: path}, nil
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Create stores a new session; its id must be new.
func (s *Store) Create(sess *Session) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(sessionsBucket)
		if b.Get([]byte(sess.ID)) != nil {
			return fmt.Errorf("session id %s exists", sess.ID)
		}
		if _, err := tx.Bucket(stepsBucket).CreateBucket([]byte(sess.ID)); err != nil {
			return err
		}
		return putJSON(b, []byte(sess.ID), sess)
	})
}

// Get returns a session (ErrNotFound when there is none).
func (s *Store) Get(id string) (*Session, error) {
	var sess *Session
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		sess, err = getSession(tx, id)
		return err
	})
	return sess, err
}

// GetWithSteps returns a session and its steps in order, read in one
// transaction.
func (s *Store) GetWithSteps(id string) (*Session, []Step, error) {
	var sess *Session
	var steps []Step
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		if sess, err = getSession(tx, id); err != nil {
			return err
		}
		steps = []Step{}
		return tx.Bucket(stepsBucket).Bucket([]byte(id)).ForEach(func(k, v []byte) error {
			var st Step
			if err := json.Unmarshal(v, &st); err != nil {
				return fmt.Errorf("session %s step %d: %w", id, binary.BigEndian.Uint64(k), err)
			}
			steps = append(steps, st)
			return nil
		})
	})
	return sess, steps, err
}

// GetStep returns step n of a session.
func (s *Store) GetStep(id string, n int) (*Step, error) {
	var st *Step
	err := s.db.View(func(tx *bolt.Tx) error {
		if _, err := getSession(tx, id); err != nil {
			return err
		}
		v := tx.Bucket(stepsBucket).Bucket([]byte(id)).Get(stepKey(n))
		if v == nil {
			return fmt.Errorf("session %s has no step %d", id, n)
		}
		st = new(Step)
		return json.Unmarshal(v, st)
	})
	return st, err
}

// Commit is one answered step to store: the step, and the session's
// state after it.
type Commit struct {
	ID   string
	Step Step
}

// CommitSteps stores the steps of a batch in one transaction (one fsync):
// each step is appended to its session, which takes its memory, memory
// version, step count, last action and, for a block, the blocked status.
// A step whose session is gone or no longer has Step.Step steps is left
// out, with ErrNotFound or ErrConflict at its index in the returned slice;
// the others are stored. The error is the transaction's own.
func (s *Store) CommitSteps(cs []Commit) ([]error, error) {
	errs := make([]error, len(cs))
	err := s.db.Update(func(tx *bolt.Tx) error {
		for i := range errs {
			errs[i] = nil
		}
		for i, c := range cs {
			sess, err := getSession(tx, c.ID)
			if err != nil {
				errs[i] = err
				continue
			}
			if sess.StepCount != c.Step.Step {
				errs[i] = ErrConflict
				continue
			}
			if err := putJSON(tx.Bucket(stepsBucket).Bucket([]byte(c.ID)), stepKey(c.Step.Step), &c.Step); err != nil {
				return err
			}
			sess.Memory, sess.MemoryVersion = c.Step.Memory, c.Step.MemoryVersion
			sess.StepCount = c.Step.Step + 1
			action := c.Step.Action
			sess.LastAction = &action
			if c.Step.Decision == DecisionBlock {
				sess.Status = StatusBlocked
			}
			if err := putJSON(tx.Bucket(sessionsBucket), []byte(c.ID), sess); err != nil {
				return err
			}
		}
		return nil
	})
	return errs, err
}

// Resume sets a blocked session active again and records when.
func (s *Store) Resume(id string, at time.Time) (*Session, error) {
	var sess *Session
	err := s.db.Update(func(tx *bolt.Tx) error {
		var err error
		if sess, err = getSession(tx, id); err != nil {
			return err
		}
		if sess.Status != StatusBlocked {
			return fmt.Errorf("session %s is %s, not blocked", id, sess.Status)
		}
		sess.Status = StatusActive
		sess.Resumes = append(sess.Resumes, at.UTC())
		return putJSON(tx.Bucket(sessionsBucket), []byte(id), sess)
	})
	return sess, err
}

// Delete removes a session and its steps.
func (s *Store) Delete(id string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		if _, err := getSession(tx, id); err != nil {
			return err
		}
		if err := tx.Bucket(stepsBucket).DeleteBucket([]byte(id)); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
			return err
		}
		return tx.Bucket(sessionsBucket).Delete([]byte(id))
	})
}

// Count returns the number of sessions.
func (s *Store) Count() (int, error) {
	n := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(sessionsBucket).Stats().KeyN
		return nil
	})
	return n, err
}

func getSession(tx *bolt.Tx, id string) (*Session, error) {
	v := tx.Bucket(sessionsBucket).Get([]byte(id))
	if v == nil {
		return nil, ErrNotFound
	}
	sess := new(Session)
	if err := json.Unmarshal(v, sess); err != nil {
		return nil, fmt.Errorf("session %s: %w", id, err)
	}
	return sess, nil
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, data)
}

// stepKey orders steps by index in the session's bucket.
func stepKey(n int) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, uint64(n))
	return k
}
