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
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

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
}

// Store is the sessions database. Every call runs inside a guard
// (storeguard.go): a panic or a memory fault of the database code (a
// damaged file) becomes an error, marks the store damaged and makes every
// later call fail at once.
type Store struct {
	db   *bolt.DB
	path string

	mu      sync.Mutex // held across every write, so that usage follows the commits exactly
	usage   Usage
	tenants map[string]Usage // what each owner's sessions hold (owners with none left out)
	limits  Limits
	damage  atomic.Pointer[error] // the first damage found; nil while healthy
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

// StoreOptions say how OpenStoreWith opens the database.
type StoreOptions struct {
	LockWait time.Duration // a second process on the same file fails after this long
	// Init lets an empty (0-byte) sessions.db be replaced by a new
	// database. Without it such a file is refused: it is where a database
	// was, and every session it held is gone.
	Init bool
}

// OpenStore opens (creating if needed) DIR/sessions.db. A second process
// on the same file fails within lockWait.
func OpenStore(dir string, lockWait time.Duration) (*Store, error) {
	return OpenStoreWith(dir, StoreOptions{LockWait: lockWait})
}

// OpenStoreWith opens (creating if needed) DIR/sessions.db after checking
// it (CheckFile, then every page and value: checkDB): damage is an error
// that names it, before anything is served.
func OpenStoreWith(dir string, opts StoreOptions) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("serve: state directory: %w", err)
	}
	path := filepath.Join(dir, DBFile)
	if err := CheckFile(path); errors.Is(err, errEmptyFile) && opts.Init {
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("serve: --init: %w", err)
		}
	} else if errors.Is(err, errEmptyFile) {
		return nil, err
	} else if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s := &Store{path: path}
	var db *bolt.DB
	err := s.safely(func() error {
		var err error
		db, err = openBolt(path, bolt.Options{Timeout: opts.LockWait})
		return err
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("serve: %s is locked by another process (another mageguard serve on the same --state?)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("serve: open %s: %w", path, err)
	}
	s.db = db
	err = s.update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{sessionsBucket, stepsBucket} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		rep := s.check()
		s.usage, s.tenants = Usage{Sessions: rep.Sessions, Bytes: rep.Bytes}, rep.tenants
		if rep.Problems > 0 {
			err = &DamageError{Path: path, Problem: strings.Join(rep.Damaged[:min(3, len(rep.Damaged))], "; ")}
		}
	}
	if err != nil {
		s.Close()
		if errors.As(err, new(*DamageError)) {
			return nil, fmt.Errorf("serve: %w", err)
		}
		return nil, fmt.Errorf("serve: %s: %w", path, err)
	}
	return s, nil
}

// Path is the database file.
func (s *Store) Path() string { return s.path }

// SetLimits sets the bounds Create enforces.
func (s *Store) SetLimits(l Limits) {
	s.mu.Lock()
	s.limits = l
	s.mu.Unlock()
}

// Usage returns what the store holds.
func (s *Store) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage
}

// UsageOf returns what the sessions of one owner (a tenant) hold.
func (s *Store) UsageOf(owner string) Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tenants[owner]
}

// Create stores a new session; its id must be new. Past a limit it
// returns a *LimitError.
func (s *Store) Create(sess *Session) error {
	data, err := json.Marshal(sess)
	if err != nil {
		return err
	}
	size := int64(len(sess.ID) + len(data))
	return s.updateUsage(func(tx *bolt.Tx, u *tally) error {
		if err := u.admit(s.limits, sess.Owner, 1, size); err != nil {
			return err
		}
		b := tx.Bucket(sessionsBucket)
		if b.Get([]byte(sess.ID)) != nil {
			return fmt.Errorf("session id %s exists", sess.ID)
		}
		if _, err := tx.Bucket(stepsBucket).CreateBucket([]byte(sess.ID)); err != nil {
			return err
		}
		u.add(sess.Owner, 1, size)
		return b.Put([]byte(sess.ID), data)
	})
}

// Get returns a session (ErrNotFound when there is none).
func (s *Store) Get(id string) (*Session, error) {
	var sess *Session
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		sess, _, err = getSession(tx, id)
		return err
	})
	return sess, err
}

// GetWithSteps returns a session and its steps in order, read in one
// transaction.
func (s *Store) GetWithSteps(id string) (*Session, []Step, error) {
	var sess *Session
	var steps []Step
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		if sess, _, err = getSession(tx, id); err != nil {
			return err
		}
		steps = []Step{}
		b := stepsOf(tx, id)
		if b == nil {
			return fmt.Errorf("session %s has no bucket of steps", id)
		}
		return b.ForEach(func(k, v []byte) error {
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
	err := s.view(func(tx *bolt.Tx) error {
		if _, _, err := getSession(tx, id); err != nil {
			return err
		}
		b := stepsOf(tx, id)
		if b == nil {
			return fmt.Errorf("session %s has no bucket of steps", id)
		}
		v := b.Get(stepKey(n))
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
// version, step count, last action, the time of the step (UpdatedAt) and,
// for a block, the blocked status. A step whose session is gone or no
// longer has Step.Step steps is left out, with ErrNotFound or ErrConflict
// at its index in the returned slice, and so is a step that would take the
// stored bytes past Limits.MaxBytes or its session's owner's past
// Limits.MaxBytesPerTenant, with a *LimitError (no step takes the store
// past its limits); the others are stored. The error is the transaction's
// own.
func (s *Store) CommitSteps(cs []Commit) ([]error, error) {
	errs := make([]error, len(cs))
	err := s.updateUsage(func(tx *bolt.Tx, u *tally) error {
		for i := range errs {
			errs[i] = nil
		}
		for i, c := range cs {
			sess, old, err := getSession(tx, c.ID)
			if err != nil {
				errs[i] = err
				continue
			}
			if sess.StepCount != c.Step.Step {
				errs[i] = ErrConflict
				continue
			}
			sess.Memory, sess.MemoryVersion = c.Step.Memory, c.Step.MemoryVersion
			sess.StepCount = c.Step.Step + 1
			action := c.Step.Action
			sess.LastAction = &action
			sess.UpdatedAt = c.Step.DecidedAt
			if c.Step.Decision == DecisionBlock {
				sess.Status = StatusBlocked
			}
			step, err := json.Marshal(&c.Step)
			if err != nil {
				return err
			}
			entry, err := json.Marshal(sess)
			if err != nil {
				return err
			}
			key := stepKey(c.Step.Step)
			grow := int64(len(key) + len(step) + len(c.ID) + len(entry) - old)
			if err := u.admit(s.limits, sess.Owner, 0, grow); err != nil {
				errs[i] = err
				continue
			}
			steps := stepsOf(tx, c.ID)
			if steps == nil {
				return fmt.Errorf("session %s has no bucket of steps", c.ID)
			}
			if err := steps.Put(key, step); err != nil {
				return err
			}
			if err := tx.Bucket(sessionsBucket).Put([]byte(c.ID), entry); err != nil {
				return err
			}
			u.add(sess.Owner, 0, grow)
		}
		return nil
	})
	return errs, err
}

// Resume sets a blocked session active again and records when.
func (s *Store) Resume(id string, at time.Time) (*Session, error) {
	var sess *Session
	err := s.updateUsage(func(tx *bolt.Tx, u *tally) error {
		var err error
		var old int
		if sess, old, err = getSession(tx, id); err != nil {
			return err
		}
		if sess.Status != StatusBlocked {
			return fmt.Errorf("session %s is %s, not blocked", id, sess.Status)
		}
		sess.Status = StatusActive
		sess.Resumes = append(sess.Resumes, at.UTC())
		sess.UpdatedAt = at.UTC()
		n, err := putJSON(tx.Bucket(sessionsBucket), []byte(id), sess)
		u.add(sess.Owner, 0, int64(n-old))
		return err
	})
	return sess, err
}

// Delete removes a session and its steps.
func (s *Store) Delete(id string) error {
	return s.updateUsage(func(tx *bolt.Tx, u *tally) error {
		return deleteSession(tx, id, u)
	})
}

// Idle returns the ids of the sessions last created, stepped or resumed
// before t.
func (s *Store) Idle(before time.Time) ([]string, error) {
	var ids []string
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(sessionsBucket).ForEach(func(k, v []byte) error {
			var at activity
			if json.Unmarshal(v, &at) == nil && at.last().Before(before) {
				ids = append(ids, string(k))
			}
			return nil
		})
	})
	return ids, err
}

// DeleteIdle deletes session id if it is still idle since before, and
// reports whether it did.
func (s *Store) DeleteIdle(id string, before time.Time) (bool, error) {
	deleted := false
	err := s.updateUsage(func(tx *bolt.Tx, u *tally) error {
		v := tx.Bucket(sessionsBucket).Get([]byte(id))
		var at activity
		if v == nil || json.Unmarshal(v, &at) != nil || !at.last().Before(before) {
			return nil
		}
		deleted = true
		return deleteSession(tx, id, u)
	})
	return deleted && err == nil, err
}

// activity is what Idle reads of a session.
type activity struct {
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func (a activity) last() time.Time {
	if a.UpdatedAt.After(a.CreatedAt) {
		return a.UpdatedAt
	}
	return a.CreatedAt
}

// List returns every session, oldest first (ties by id), without steps.
func (s *Store) List() ([]*Session, error) {
	var out []*Session
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(sessionsBucket).ForEach(func(k, v []byte) error {
			sess := new(Session)
			if err := json.Unmarshal(v, sess); err != nil {
				return fmt.Errorf("session %s: %w", ShortText(string(k)), err)
			}
			out = append(out, sess)
			return nil
		})
	})
	slices.SortFunc(out, func(a, b *Session) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out, err
}

// Count returns the number of sessions.
func (s *Store) Count() (int, error) {
	return s.Usage().Sessions, nil
}

// deleteSession removes a session and its steps, taking their bytes off u.
func deleteSession(tx *bolt.Tx, id string, u *tally) error {
	sess, old, err := getSession(tx, id)
	if err != nil {
		return err
	}
	size := int64(old)
	if steps := stepsOf(tx, id); steps != nil {
		steps.ForEach(func(k, v []byte) error {
			size += int64(len(k) + len(v))
			return nil
		})
		if err := tx.Bucket(stepsBucket).DeleteBucket([]byte(id)); err != nil {
			return err
		}
	}
	if err := tx.Bucket(sessionsBucket).Delete([]byte(id)); err != nil {
		return err
	}
	u.add(sess.Owner, -1, -size)
	return nil
}

// getSession reads a session and the bytes its entry takes.
func getSession(tx *bolt.Tx, id string) (*Session, int, error) {
	v := tx.Bucket(sessionsBucket).Get([]byte(id))
	if v == nil {
		return nil, 0, ErrNotFound
	}
	sess := new(Session)
	if err := json.Unmarshal(v, sess); err != nil {
		return nil, 0, fmt.Errorf("session %s: %w", id, err)
	}
	return sess, len(id) + len(v), nil
}

// stepsOf is a session's bucket of steps (nil when it has none).
func stepsOf(tx *bolt.Tx, id string) *bolt.Bucket {
	return tx.Bucket(stepsBucket).Bucket([]byte(id))
}

// putJSON stores v as JSON under key and returns the bytes the entry takes.
func putJSON(b *bolt.Bucket, key []byte, v any) (int, error) {
	if b == nil {
		return 0, errors.New("no such bucket")
	}
	data, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	return len(key) + len(data), b.Put(key, data)
}

// stepKey orders steps by index in the session's bucket.
func stepKey(n int) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, uint64(n))
	return k
}
