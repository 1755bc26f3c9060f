package store

// Space kept for deletes. bbolt copies every page a transaction changes
// and writes the copies to free pages of its file, or past its end; a
// delete on a full disk works only while the file has enough free pages,
// and a run of small writes can use them up (then the delete, which frees
// pages, cannot write the pages that free them). So a read-write Bolt
// keeps DIR/sessions.reserve, ReserveBytes allocated on the disk: a delete
// that fails for a full disk removes it and tries again, writing into the
// space it held. The reserve is made again at open and, once gone, after
// a later write (at most every reserveRetry) when the disk has room.

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ReserveFile is the reserve's name under the state directory, and
// ReserveBytes its size.
const (
	ReserveFile  = "sessions.reserve"
	ReserveBytes = 8 << 20
)

// reserveRetry is how often a missing reserve is made again.
const reserveRetry = 10 * time.Second

// DiskFullError is a write refused for a full disk (ENOSPC or a quota).
// Reserve says whether the space kept for deletes is still there (a
// delete then works).
type DiskFullError struct {
	Dir     string
	Reserve bool
	Err     error
}

func (e *DiskFullError) Error() string {
	if e.Reserve {
		return fmt.Sprintf("the disk holding %s is full (%v): delete finished sessions (space is kept for that) or free space on it", e.Dir, e.Err)
	}
	return fmt.Sprintf("the disk holding %s is full (%v), and the space kept for deletes (%s) is used: free space on that disk, then delete finished sessions", e.Dir, e.Err, ReserveFile)
}

func (e *DiskFullError) Unwrap() error { return e.Err }

// diskFull reports whether err is a full disk's.
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func (s *Bolt) reservePath() string { return filepath.Join(filepath.Dir(s.path), ReserveFile) }

// keepReserve makes the reserve whole unless it is; s.mu is held (or the
// store not yet shared). A disk without room leaves no reserve.
func (s *Bolt) keepReserve() {
	s.reserveTried = time.Now()
	path := s.reservePath()
	if st, err := os.Stat(path); err == nil && st.Size() == ReserveBytes {
		s.reserved = true
		return
	}
	err := allocateFile(path, ReserveBytes)
	if err != nil {
		os.Remove(path)
	}
	s.reserved = err == nil
}

// dropReserve removes the reserve, and reports whether there was one to
// remove; s.mu is held.
func (s *Bolt) dropReserve() bool {
	if !s.reserved {
		return false
	}
	s.reserved = false
	s.reserveTried = time.Now()
	return os.Remove(s.reservePath()) == nil
}

// allocateFile makes path a file of n bytes held on the disk (not a
// sparse one, which would hold nothing), synced.
func allocateFile(path string, n int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := allocate(f, n); err != nil {
		// No fallocate: write the bytes (random ones: a compressing file
		// system would store zeros as nothing).
		buf := make([]byte, 1<<20)
		rand.Read(buf)
		for left := n; left > 0 && err == nil; left -= int64(len(buf)) {
			_, err = f.Write(buf[:min(left, int64(len(buf)))])
		}
		if err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
