// Package lock gives one process at a time the use of a folder that
// mageguard writes into over time (a run's --out, a sweep's folder), so
// that two writers never interleave their files: flock(2) on a lock file
// in the folder (FileName), refused at once with a *HeldError naming the
// holder's PID, released by the kernel however the holder exits. Take it
// before reading anything, hold it while writing, and only then clean up
// what a killed writer left (atomicfile.RemoveStale). A lock is per open
// file: the same process locking a folder twice is refused too; locks of
// different folders nest (docs/reliability.md#output-folders).
package lock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// FileName is the lock file Acquire takes inside a folder.
const FileName = ".mageguard.lock"

// Lock is a held lock. Release it when done; the kernel releases it when
// the process dies.
type Lock struct {
	path string
	f    *os.File
}

// HeldError is the error of a lock another holder already has.
type HeldError struct {
	Dir     string // the folder (or lock file) asked for
	PID     int    // the holder's process id, 0 when it could not be read
	Command string // the holder's command line, when recorded
}

func (e *HeldError) Error() string {
	who := "PID unknown"
	if e.PID > 0 {
		who = "PID " + strconv.Itoa(e.PID)
		if e.PID == os.Getpid() {
			who += ", this process"
		}
	}
	if e.Command != "" {
		who += ": " + e.Command
	}
	return fmt.Sprintf("%s is in use by another mageguard process (%s): wait for it to finish, or use another folder", e.Dir, who)
}

// Acquire takes the exclusive lock of dir, creating dir when it does not
// exist. It does not wait: when another holder has it, the error is a
// *HeldError naming that holder.
func Acquire(dir string) (*Lock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return acquire(filepath.Join(dir, FileName), dir)
}

// AcquireFile takes the exclusive lock of the lock file path itself (its
// folder must exist), for a lock that covers part of a folder, e.g. one
// point of a sweep.
func AcquireFile(path string) (*Lock, error) {
	return acquire(path, path)
}

func acquire(path, name string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			held := &HeldError{Dir: name}
			held.PID, held.Command = readHolder(f)
			return nil, held
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	// Record who holds it, for the message of the next one refused.
	cmd := strings.Join(os.Args, " ")
	if len(cmd) > 300 {
		cmd = cmd[:300] + "…"
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(fmt.Sprintf("%d\n%s\n", os.Getpid(), cmd)), 0)
	}
	return &Lock{path: path, f: f}, nil
}

// readHolder reads the PID and command line a holder wrote into the lock file.
func readHolder(f *os.File) (int, string) {
	buf := make([]byte, 512)
	n, _ := f.ReadAt(buf, 0)
	lines := strings.SplitN(string(buf[:n]), "\n", 3)
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 {
		return 0, ""
	}
	cmd := ""
	if len(lines) > 1 {
		cmd = strings.TrimSpace(lines[1])
	}
	return pid, cmd
}

// Path is the lock file.
func (l *Lock) Path() string { return l.path }

// Release gives the lock up. It is a no-op on a nil or released lock.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	f := l.f
	l.f = nil
	f.Truncate(0)
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("unlock %s: %w", l.path, err)
	}
	return nil
}
