package store

// The store's boundary: bbolt reads its file through a memory map and
// trusts what it finds there, so a damaged page makes it panic (slice
// bounds, "assertion failed") or fault (SIGBUS past the end of a
// truncated file), which would end the process. Every call into bbolt
// runs through safely: memory faults become panics
// (debug.SetPanicOnFault), a panic becomes a *DamageError, and the store
// is marked damaged: every later call fails at once with that error (the
// server's /healthz answers 503) until an operator checks the file
// (mageguard serve --check-state DIR) and restarts.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DamageError is a sessions database found damaged.
type DamageError struct {
	Path    string
	Problem string
}

func (e *DamageError) Error() string {
	return fmt.Sprintf("%s is damaged: %s (mageguard serve --check-state DIR reports what is readable; docs/reliability.md#the-sessions-database says how to recover)", e.Path, e.Problem)
}

// Damaged returns the damage found in the store since it was opened (a
// *DamageError), or nil.
func (s *Bolt) Damaged() error {
	if d := s.damage.Load(); d != nil {
		return *d
	}
	return nil
}

// safely runs fn, which calls into bbolt, with memory faults turned into
// panics and a panic into a *DamageError that marks the store damaged.
// Once damaged, it runs nothing and returns the damage.
func (s *Bolt) safely(fn func() error) error {
	if d := s.damage.Load(); d != nil {
		return *d
	}
	err := try(fn)
	var damage *DamageError
	if errors.As(err, &damage) {
		damage.Path = s.path
		s.damage.CompareAndSwap(nil, &err)
	}
	return err
}

// try runs fn with memory faults turned into panics, and returns a panic
// as a *DamageError (without a path).
func try(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &DamageError{Problem: fmt.Sprintf("reading it failed: %v", r)}
		}
	}()
	return fn()
}

// openBolt opens a bbolt database with memory faults turned into panics
// and a panic into a *DamageError (without a path), as try does. bbolt
// closes its file on the errors it returns, but a panic inside Open (a
// damaged page it reads while opening) would leave the file open and its
// flock held, so that no later open in this process could take the file:
// openBolt opens the file itself (Options.OpenFile) and, on that path,
// unlocks and closes it. (The unlock is explicit: the memory map bbolt
// may have made by then keeps the open file alive, and with it the lock,
// after the descriptor is closed. The map itself stays: it is not
// reachable from outside bbolt.)
func openBolt(path string, o bolt.Options) (*bolt.DB, error) {
	var file *os.File
	open := o.OpenFile
	if open == nil {
		open = os.OpenFile
	}
	o.OpenFile = func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := open(name, flag, perm)
		file = f
		return f, err
	}
	var db *bolt.DB
	err := try(func() error {
		var err error
		db, err = bolt.Open(path, 0o600, &o)
		return err
	})
	if errors.As(err, new(*DamageError)) && file != nil {
		syscall.Flock(int(file.Fd()), syscall.LOCK_UN)
		file.Close()
	}
	return db, err
}

// view runs a read-only transaction safely.
func (s *Bolt) view(fn func(tx *bolt.Tx) error) error {
	return s.safely(func() error { return s.db.View(fn) })
}

// updateUsage runs a read-write transaction safely with a tally of the
// store's usage, which fn updates as it writes and which becomes the
// store's when the transaction commits.
// A write that fails for a full disk returns a *DiskFullError; one that
// succeeds makes the space kept for deletes again if it is gone
// (reserve.go).
func (s *Bolt) updateUsage(fn func(tx *bolt.Tx, u *tally) error) error {
	return s.write(func(u *tally) error { return s.updateLocked(fn, u) })
}

// freeing is updateUsage for a write that frees space (a delete): when it
// fails for a full disk, it removes the space kept for deletes and runs
// once more, writing there.
func (s *Bolt) freeing(fn func(tx *bolt.Tx, u *tally) error) error {
	return s.write(func(u *tally) error {
		err := s.updateLocked(fn, u)
		if errors.As(err, new(*DiskFullError)) && s.dropReserve() {
			err = s.updateLocked(fn, u)
		}
		return err
	})
}

// updateLocked runs a read-write transaction safely; s.mu is held.
func (s *Bolt) updateLocked(fn func(tx *bolt.Tx, u *tally) error, u *tally) error {
	// A failed transaction leaves u as it was: fn changes a copy.
	t := u.clone()
	err := s.safely(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			if err := fn(tx, t); err != nil {
				return err
			}
			if s.failWrite != nil {
				return s.failWrite()
			}
			return nil
		})
	})
	if diskFull(err) {
		return &DiskFullError{Dir: filepath.Dir(s.path), Reserve: s.reserved, Err: err}
	}
	if err != nil {
		return err
	}
	*u = *t
	if !s.reserved && !s.readOnly && time.Since(s.reserveTried) >= reserveRetry {
		s.keepReserve()
	}
	return nil
}

// update runs a read-write transaction safely.
func (s *Bolt) update(fn func(tx *bolt.Tx) error) error {
	return s.updateUsage(func(tx *bolt.Tx, _ *tally) error { return fn(tx) })
}

// Close closes the database. A damaged one may have its locks held by the
// call that failed: Close gives up on it after two seconds.
func (s *Bolt) Close() error {
	if s.db == nil {
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- try(s.db.Close) }()
	if s.Damaged() == nil {
		return <-done
	}
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Second):
		return fmt.Errorf("%s: closing the damaged database timed out", s.path)
	}
}
