package store

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
	"strings"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Bolt is the sessions database in one bbolt file. Every call runs
// inside a guard (guard.go): a panic or a memory fault of the database
// code (a damaged file) becomes an error, marks the store damaged and
// makes every later call fail at once.
type Bolt struct {
	db   *bolt.DB
	path string

	counts
	damage atomic.Pointer[error] // the first damage found; nil while healthy
	scan   bool                  // List reads every session: a read-only file without indexes (index.go)

	// The space kept for deletes (reserve.go), under counts.mu.
	reserved     bool      // DIR/sessions.reserve is whole
	reserveTried time.Time // when it was last made or removed
	readOnly     bool
	failWrite    func() error // tests: the error every write transaction fails with (nil: none)
}

var (
	sessionsBucket = []byte("sessions")
	stepsBucket    = []byte("steps")
)

// Options say how Open opens the database.
type Options struct {
	LockWait time.Duration // a second process on the same file fails after this long
	// Init lets an empty (0-byte) sessions.db be replaced by a new
	// database. Without it such a file is refused: it is where a database
	// was, and every session it held is gone.
	Init bool
	// ReadOnly opens an existing database for reading only (every write
	// fails), sharing it with other readers; a server holding it makes
	// the open wait LockWait, then fail.
	ReadOnly bool
}

// Open opens DIR/sessions.db (creating it if needed, unless ReadOnly)
// after checking it (CheckFile, then every page and value: check): damage
// is an error that names it, before anything is served. A second process
// on the same file fails within opts.LockWait.
func Open(dir string, opts Options) (*Bolt, error) {
	path := filepath.Join(dir, DBFile)
	if opts.ReadOnly {
		if opts.Init {
			return nil, errors.New("store: Init with ReadOnly")
		}
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: state directory: %w", err)
	}
	if err := CheckFile(path); errors.Is(err, errEmptyFile) && opts.Init {
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("store: --init: %w", err)
		}
	} else if errors.Is(err, errEmptyFile) {
		return nil, err
	} else if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	s := &Bolt{path: path}
	var db *bolt.DB
	err := s.safely(func() error {
		var err error
		db, err = openBolt(path, bolt.Options{Timeout: opts.LockWait, ReadOnly: opts.ReadOnly})
		return err
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("store: %s is locked by another process (another mageguard serve on the same --state?)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s.db = db
	if !opts.ReadOnly {
		err = s.update(func(tx *bolt.Tx) error {
			for _, b := range [][]byte{sessionsBucket, stepsBucket} {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err == nil {
		rep := s.check()
		s.usage, s.tenants = Usage{Sessions: rep.Sessions, Bytes: rep.Bytes}, rep.tenants
		if rep.Problems > 0 {
			err = &DamageError{Path: path, Problem: strings.Join(rep.Damaged[:min(3, len(rep.Damaged))], "; ")}
		}
		if err == nil {
			err = s.ensureIndexes(rep.entries, opts.ReadOnly)
		}
		if s.readOnly = opts.ReadOnly; err == nil && !opts.ReadOnly {
			s.keepReserve()
		}
	}
	if err != nil {
		s.Close()
		if errors.As(err, new(*DamageError)) {
			return nil, fmt.Errorf("store: %w", err)
		}
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	return s, nil
}

// ensureIndexes rebuilds the list's indexes unless they hold exactly the
// entries of the sessions stored; read-only, it makes List read every
// session instead.
func (s *Bolt) ensureIndexes(entries []indexEntry, readOnly bool) error {
	ok := false
	if err := s.view(func(tx *bolt.Tx) error { ok = indexed(tx, entries); return nil }); err != nil {
		return err
	}
	switch {
	case ok:
		return nil
	case readOnly:
		s.scan = true
		return nil
	}
	return s.update(func(tx *bolt.Tx) error { return reindex(tx, entries) })
}

// Path is the database file.
func (s *Bolt) Path() string { return s.path }

// Create stores a new session; its id must be new. Past a limit it
// returns a *LimitError. An owner name longer than MaxOwnerBytes is refused.
func (s *Bolt) Create(sess *Session) error {
	if err := checkOwner(sess.Owner); err != nil {
		return err
	}
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
		if err := putIndex(tx, entryOf(sess)); err != nil {
			return err
		}
		return b.Put([]byte(sess.ID), data)
	})
}

// Get returns a session (ErrNotFound when there is none).
func (s *Bolt) Get(id string) (*Session, error) {
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
func (s *Bolt) GetWithSteps(id string) (*Session, []Step, error) {
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
func (s *Bolt) GetStep(id string, n int) (*Step, error) {
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
		if v == nil || n < 0 {
			return fmt.Errorf("session %s step %d: %w", id, n, ErrNoStep)
		}
		st = new(Step)
		return json.Unmarshal(v, st)
	})
	return st, err
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
func (s *Bolt) CommitSteps(cs []Commit) ([]error, error) {
	errs := make([]error, len(cs))
	err := s.updateUsage(func(tx *bolt.Tx, u *tally) error {
		get := func(id string) (*Session, int, error) { return getSession(tx, id) }
		return commitSteps(cs, errs, s.limits, u, get, func(id string, n int, step, entry []byte) error {
			steps := stepsOf(tx, id)
			if steps == nil {
				return fmt.Errorf("session %s has no bucket of steps", id)
			}
			if err := steps.Put(stepKey(n), step); err != nil {
				return err
			}
			return tx.Bucket(sessionsBucket).Put([]byte(id), entry)
		})
	})
	return errs, err
}

// Resume sets a blocked session active again and records when.
func (s *Bolt) Resume(id string, at time.Time) (*Session, error) {
	var sess *Session
	err := s.updateUsage(func(tx *bolt.Tx, u *tally) error {
		var err error
		var old int
		if sess, old, err = getSession(tx, id); err != nil {
			return err
		}
		if err := resume(sess, at); err != nil {
			return err
		}
		n, err := putJSON(tx.Bucket(sessionsBucket), []byte(id), sess)
		u.add(sess.Owner, 0, int64(n-old))
		return err
	})
	return sess, err
}

// SetLabel sets an operator's label on step n of a session.
func (s *Bolt) SetLabel(id string, n int, l StepLabel) error {
	return s.editStep(id, n, false, withLabel(l))
}

// SetResult records what step n's action returned.
func (s *Bolt) SetResult(id string, n int, result string) error {
	return s.editStep(id, n, true, withResult(result))
}

// editStep rewrites step n of a session with edit, counting the bytes it
// adds; with limit, growth past a byte limit is refused.
func (s *Bolt) editStep(id string, n int, limit bool, edit func(*Step)) error {
	return s.updateUsage(func(tx *bolt.Tx, u *tally) error {
		sess, _, err := getSession(tx, id)
		if err != nil {
			return err
		}
		b := stepsOf(tx, id)
		if b == nil {
			return fmt.Errorf("session %s has no bucket of steps", id)
		}
		var v []byte
		if n >= 0 {
			v = b.Get(stepKey(n))
		}
		if v == nil {
			return fmt.Errorf("session %s step %d: %w", id, n, ErrNoStep)
		}
		data, err := edited(v, edit)
		if err != nil {
			return fmt.Errorf("session %s step %d: %w", id, n, err)
		}
		grow := int64(len(data) - len(v))
		if limit {
			if err := u.admit(s.limits, sess.Owner, 0, grow); err != nil {
				return err
			}
		}
		if err := b.Put(stepKey(n), data); err != nil {
			return err
		}
		u.add(sess.Owner, 0, grow)
		return nil
	})
}

// Delete removes a session and its steps.
func (s *Bolt) Delete(id string) error {
	return s.freeing(func(tx *bolt.Tx, u *tally) error {
		return deleteSession(tx, id, u)
	})
}

// Idle returns the ids of the sessions last created, stepped or resumed
// before t.
func (s *Bolt) Idle(before time.Time) ([]string, error) {
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
func (s *Bolt) DeleteIdle(id string, before time.Time) (bool, error) {
	deleted := false
	err := s.freeing(func(tx *bolt.Tx, u *tally) error {
		deleted = false
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

// List returns a page of sessions, oldest first (ties by id), without
// steps: it reads the page's sessions alone, through the indexes (a
// read-only store whose file has none reads every session).
func (s *Bolt) List(q ListQuery) (Page, error) {
	after, err := parseCursor(q.Cursor)
	if err != nil {
		return Page{}, err
	}
	var p Page
	err = s.view(func(tx *bolt.Tx) error {
		var err error
		if s.scan {
			p, err = listByScan(tx, q, after)
		} else {
			p, err = listIndexed(tx, q, after)
		}
		return err
	})
	return p, err
}

// listByScan reads every session for a page.
func listByScan(tx *bolt.Tx, q ListQuery, after []byte) (Page, error) {
	var all []*Session
	err := tx.Bucket(sessionsBucket).ForEach(func(k, v []byte) error {
		sess := new(Session)
		if err := json.Unmarshal(v, sess); err != nil {
			return fmt.Errorf("session %s: %w", shortText(string(k)), err)
		}
		if q.All || sess.Owner == q.Owner {
			all = append(all, sess)
		}
		return nil
	})
	if err != nil {
		return Page{}, err
	}
	return pageOf(all, after, q.Limit), nil
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
	if err := deleteIndex(tx, entryOf(sess)); err != nil {
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

// stepKeySize is the bytes of a step's key.
const stepKeySize = 8

// stepKey orders steps by index in the session's bucket.
func stepKey(n int) []byte {
	k := make([]byte, stepKeySize)
	binary.BigEndian.PutUint64(k, uint64(n))
	return k
}

var (
	_ Store = (*Bolt)(nil)
	_ Store = (*Memory)(nil)
)
