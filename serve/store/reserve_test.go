package store

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestADeleteOnAFullDiskUsesTheReserve: with every write failing for a
// full disk (injected) until the space kept for deletes is freed, a create
// is a *DiskFullError (the reserve still there) that changes nothing, and
// a delete works: it removes the reserve and writes again. With the
// reserve used and the disk still full, a delete is a *DiskFullError
// saying to free space; once there is room, a delete works and the
// reserve is made again.
func TestADeleteOnAFullDiskUsesTheReserve(t *testing.T) {
	dir := t.TempDir()
	s := openTestBolt(t, dir)
	reserve := s.reservePath()
	if st, err := os.Stat(reserve); err != nil || st.Size() != ReserveBytes {
		t.Fatalf("no reserve after open: %v", err)
	}
	for _, id := range []string{"s_0", "s_1", "s_2"} {
		if err := s.Create(&Session{ID: id, Owner: "a", UserPrompt: "p", Status: StatusActive}); err != nil {
			t.Fatal(err)
		}
	}
	enospc := &os.PathError{Op: "write", Path: s.Path(), Err: syscall.ENOSPC}
	s.failWrite = func() error { // full until the reserve is gone
		if _, err := os.Stat(reserve); err == nil {
			return enospc
		}
		return nil
	}
	before := s.Usage()
	var full *DiskFullError
	err := s.Create(&Session{ID: "s_3", Owner: "a", UserPrompt: "p", Status: StatusActive})
	if !errors.As(err, &full) || !full.Reserve || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "delete finished sessions") {
		t.Fatalf("create on a full disk: %v", err)
	}
	if _, err := s.Get("s_3"); !errors.Is(err, ErrNotFound) || s.Usage() != before {
		t.Errorf("the refused create changed the store: %v, usage %+v, before %+v", err, s.Usage(), before)
	}
	if err := s.Delete("s_0"); err != nil {
		t.Fatalf("delete on a full disk: %v", err)
	}
	if _, err := os.Stat(reserve); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the reserve is still there: %v", err)
	}
	one := before.Bytes / 3 // three sessions alike
	if u := s.Usage(); u.Sessions != 2 || u.Bytes != before.Bytes-one {
		t.Errorf("usage %+v after deleting one of 3 sessions of %d bytes, %+v before", u, one, before)
	}
	s.failWrite = func() error { return enospc } // the reserve's space used too
	err = s.Delete("s_1")
	if !errors.As(err, &full) || full.Reserve || !strings.Contains(err.Error(), "free space on that disk") {
		t.Fatalf("delete with the reserve used: %v", err)
	}
	if _, err := s.Get("s_1"); err != nil {
		t.Errorf("the failed delete deleted: %v", err)
	}
	s.failWrite = nil // room again
	s.reserveTried = time.Time{}
	if err := s.Delete("s_1"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(reserve); err != nil || st.Size() != ReserveBytes || !s.reserved {
		t.Errorf("the reserve was not made again: %v", err)
	}
	if u := s.Usage(); u.Sessions != 1 || u.Bytes != before.Bytes-2*one {
		t.Errorf("usage %+v", u)
	}
}
