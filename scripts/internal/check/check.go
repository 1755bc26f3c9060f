// Package check runs a program of scripts/ that checks something, with the
// few methods of testing.T those checks use: Errorf marks the run failed
// and goes on, Fatalf stops it, clean-ups run either way and the process
// exits 1 if anything failed. The long checks (make serve-load,
// acceptance-eval, …) are programs rather than tests so that
// `go test ./...` runs only tests; this keeps their code reading as tests.
package check

import (
	"fmt"
	"os"
	"sync"
)

// T is one run of a check.
type T struct {
	mu       sync.Mutex
	failed   bool
	cleanups []func()
	dirs     []string
}

// fatal is the panic value of Fatal, recovered by Main.
type fatal struct{}

// Main runs check and exits: 0 when nothing failed, 1 otherwise.
func Main(name string, check func(t *T)) {
	if !Run(check) {
		fmt.Fprintf(os.Stderr, "%s: FAIL\n", name)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "%s: ok\n", name)
}

// Run runs check, then its clean-ups, and reports whether nothing failed.
func Run(check func(t *T)) bool {
	t := &T{}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(fatal); !ok {
					panic(r)
				}
			}
		}()
		check(t)
	}()
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	for _, d := range t.dirs {
		os.RemoveAll(d)
	}
	return !t.Failed()
}

// Helper is testing.T's, for code shared with tests; it does nothing.
func (t *T) Helper() {}

// Logf prints a line to standard error.
func (t *T) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

// Errorf prints a line and marks the run failed.
func (t *T) Errorf(format string, args ...any) {
	t.Logf(format, args...)
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

// Fatalf prints a line, marks the run failed and stops it (from the
// goroutine that runs the check).
func (t *T) Fatalf(format string, args ...any) {
	t.Errorf(format, args...)
	panic(fatal{})
}

// Fatal is Fatalf of fmt.Sprint(args...).
func (t *T) Fatal(args ...any) { t.Fatalf("%s", fmt.Sprint(args...)) }

// Failed reports whether an Errorf or Fatalf happened.
func (t *T) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

// Cleanup registers f to run when the check ends, last registered first.
func (t *T) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

// TempDir returns a new directory removed when the check ends.
func (t *T) TempDir() string {
	d, err := os.MkdirTemp("", "mageguard-check-")
	if err != nil {
		t.Fatal(err)
	}
	t.dirs = append(t.dirs, d)
	return d
}
