package lock

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSecondAcquireIsRefusedWithTheHoldersPID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out") // created by Acquire
	first, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Acquire(dir)
	var held *HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second Acquire: %v, want a *HeldError", err)
	}
	if held.PID != os.Getpid() || !strings.Contains(err.Error(), dir) {
		t.Fatalf("HeldError %+v (%v): want PID %d and the folder named", held, err, os.Getpid())
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	again, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	again.Release()
	if err := again.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
}

func TestLocksOfDifferentFoldersNest(t *testing.T) {
	root := t.TempDir()
	outer, err := Acquire(root)
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Release()
	inner, err := Acquire(filepath.Join(root, "point"))
	if err != nil {
		t.Fatalf("inner folder: %v", err)
	}
	defer inner.Release()
	file, err := AcquireFile(filepath.Join(root, ".point.lock"))
	if err != nil {
		t.Fatalf("lock file beside: %v", err)
	}
	file.Release()
}

// TestHelperHolder is not a test: run as a child process by
// TestLockDiesWithItsHolder, it takes the lock, says so, and waits.
func TestHelperHolder(t *testing.T) {
	dir := os.Getenv("MAGEGUARD_LOCK_HELPER")
	if dir == "" {
		t.Skip("helper process only")
	}
	lk, err := Acquire(dir)
	if err != nil {
		os.Stdout.WriteString("error " + err.Error() + "\n")
		os.Exit(3)
	}
	helperLock = lk // reachable until killed: a collected *os.File is closed, which drops the flock
	os.Stdout.WriteString("locked\n")
	// Wait until killed, sleeping: with select {} and no timer pending, the
	// runtime ended the process at once ("all goroutines are asleep -
	// deadlock!"), which dropped the lock, often before the parent tried it.
	for {
		time.Sleep(time.Hour)
	}
}

// helperLock keeps TestHelperHolder's lock reachable while it waits.
var helperLock *Lock

func TestLockDiesWithItsHolder(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHolder$")
	cmd.Env = append(os.Environ(), "MAGEGUARD_LOCK_HELPER="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		cmd.Process.Kill()
		t.Fatalf("helper said %q, %v", line, err)
	}
	_, err = Acquire(dir)
	var held *HeldError
	if !errors.As(err, &held) || held.PID != cmd.Process.Pid {
		cmd.Process.Kill()
		t.Fatalf("while the helper holds it: %v, want a *HeldError with PID %d", err, cmd.Process.Pid)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	lk, err := Acquire(dir)
	if err != nil {
		t.Fatalf("after kill -9 of the holder: %v", err)
	}
	lk.Release()
}
