package sweep

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/internal/lock"
)

// TestASecondSweepIntoOneFolderIsRefused: while a sweep holds its output
// folder, another is refused at once (before any point runs) with the
// holder's PID; while a point runs (a `--point N` elsewhere holds it), a
// sweep reaching that point stops with the holder named, and never writes
// into the point's folder.
func TestASecondSweepIntoOneFolderIsRefused(t *testing.T) {
	clock := fakeClock()
	p := schedule2x2(t)
	out := t.TempDir()
	held, err := lock.Acquire(out)
	if err != nil {
		t.Fatal(err)
	}
	var ran []int
	err = Run(context.Background(), p, out, Options{Runner: fakeRunner(&ran, -1), Now: clock})
	var he *lock.HeldError
	if !errors.As(err, &he) || he.PID != os.Getpid() || len(ran) != 0 {
		t.Fatalf("sweep into a locked folder: %v, ran %v", err, ran)
	}
	held.Release()

	pointDir := filepath.Join(out, p.Points[1].Name)
	if err := os.MkdirAll(pointDir, 0o755); err != nil {
		t.Fatal(err)
	}
	pointLock, err := lock.AcquireFile(filepath.Join(pointDir, PointLockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer pointLock.Release()
	err = Run(context.Background(), p, out, Options{Runner: fakeRunner(&ran, -1), Now: clock})
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "point 1") {
		t.Fatalf("sweep reaching a point run elsewhere: %v", err)
	}
	if len(ran) != 1 || ran[0] != 0 || Done(pointDir) {
		t.Fatalf("ran %v (want point 0 only), point 1 done: %v", ran, Done(pointDir))
	}
	if err := RunPoint(context.Background(), p, out, 1, Options{Runner: fakeRunner(&ran, -1), Now: clock}); !errors.As(err, &he) {
		t.Fatalf("--point 1 while point 1 runs: %v", err)
	}
}

// TestSweepRemovesLeftoversOfAKilledSweep: temporary files of a killed
// write in the output folder are removed on start.
func TestSweepRemovesLeftoversOfAKilledSweep(t *testing.T) {
	clock := fakeClock()
	p := schedule2x2(t)
	out := t.TempDir()
	stale := filepath.Join(out, ".summary.csv.tmp-4242")
	if err := os.WriteFile(stale, []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ran []int
	var log strings.Builder
	if err := Run(context.Background(), p, out, Options{Runner: fakeRunner(&ran, -1), Progress: &log, Now: clock}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) || !strings.Contains(log.String(), ".summary.csv.tmp-4242") {
		t.Fatalf("stale file: %v; log %q", err, log.String())
	}
}
