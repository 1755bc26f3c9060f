package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mageguard/mageguard/dataset"
)

// makeState writes a sessions database of n sessions with two steps each
// (a 3 KB user request apiece, so that the sessions take several pages)
// into a new directory, closes it, and returns the directory.
func makeState(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, Options{LockWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("s_%03d", i)
		if err := s.Create(&Session{ID: id, UserPrompt: strings.Repeat("pay the bill ", 250), Status: StatusActive}); err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 2; k++ {
			st := Step{Step: k, Action: dataset.Action{Name: "f", Arguments: []byte(`{}`)}, Memory: "m", MemoryVersion: k + 1, Decision: DecisionAllow}
			if errs, err := s.CommitSteps([]Commit{{id, st}}); err != nil || errs[0] != nil {
				t.Fatal(err, errs)
			}
		}
	}
	return dir
}

// metaOf returns the page size and the root bucket's page of a database
// file, from its current meta page (of the two, the valid one of the
// higher transaction).
func metaOf(t *testing.T, data []byte) (int, int) {
	m := parseMeta(data)
	if !m.valid {
		t.Fatal("no valid meta page")
	}
	if m1 := parseMeta(data[m.pageSize:]); m1.valid && m1.txid > m.txid {
		m = m1
	}
	return int(m.pageSize), int(m.root)
}

// openDamaged opens a damaged database: it must fail with an error naming
// the damage (never a panic or a fault: either would end the test binary),
// or, for damage bbolt never reads (a free page), open and read every
// session.
func openDamaged(t *testing.T, dir string) error {
	t.Helper()
	s, err := Open(dir, Options{LockWait: time.Second})
	if err != nil {
		return err
	}
	defer s.Close()
	if rep := s.check(); rep.Problems > 0 {
		t.Fatalf("opened a database its check finds damaged: %s", rep)
	}
	return nil
}

// TestADamagedDatabaseIsAnErrorNotACrash: damaged sessions.db
// files, made here from a database of 40 sessions: truncated to 10,000
// bytes (SIGBUS at start-up before), the root page's element count set to
// 0xffff (a panic at the first read) or its flags changed (panic:
// assertion failed) — each is refused at open with the damage named, and
// --check-state reports it; an empty file is refused unless --init.
func TestADamagedDatabaseIsAnErrorNotACrash(t *testing.T) {
	good := makeState(t, 40)
	orig, err := os.ReadFile(filepath.Join(good, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	pageSize, root := metaOf(t, orig)
	damage := map[string]func([]byte) []byte{
		"truncated to 10,000 bytes": func(b []byte) []byte { return b[:10_000] },
		"root page count 0xffff": func(b []byte) []byte {
			binary.NativeEndian.PutUint16(b[root*pageSize+10:], 0xffff)
			return b
		},
		"root page flags changed": func(b []byte) []byte {
			binary.NativeEndian.PutUint16(b[root*pageSize+8:], 0x20)
			return b
		},
		"both meta pages zeroed": func(b []byte) []byte {
			clear(b[:2*pageSize])
			return b
		},
	}
	want := map[string]string{
		"truncated to 10,000 bytes": "truncated",
		"root page count 0xffff":    "is damaged",
		"root page flags changed":   "is damaged",
		"both meta pages zeroed":    "no valid bbolt meta page",
	}
	for name, f := range damage {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, DBFile)
			if err := os.WriteFile(path, f(append([]byte(nil), orig...)), 0o600); err != nil {
				t.Fatal(err)
			}
			openErr := openDamaged(t, dir)
			if openErr == nil || !strings.Contains(openErr.Error(), want[name]) || !strings.Contains(openErr.Error(), "--check-state") {
				t.Fatalf("open: %v, want an error saying %q", openErr, want[name])
			}
			rep, err := CheckState(dir, time.Second)
			if err != nil || rep.Problems == 0 || rep.Sessions == 40 {
				t.Fatalf("check-state: %v %v", rep, err)
			}
			t.Logf("open: %v\ncheck-state: %s", openErr, rep)
		})
	}
	t.Run("empty", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, DBFile), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(dir, Options{LockWait: time.Second}); err == nil || !strings.Contains(err.Error(), "--init") {
			t.Fatalf("open: %v", err)
		}
		s, err := Open(dir, Options{LockWait: time.Second, Init: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if n := s.Usage().Sessions; n != 0 {
			t.Errorf("%d sessions after --init", n)
		}
	})
}

// TestEveryPageDamagedIsHandled: each page of the database, one at a
// time, with its element count set to 0xffff and, apart, its flags
// changed: every open fails with the damage named or (a free page, which
// bbolt never reads) opens whole; none panics or faults.
func TestEveryPageDamagedIsHandled(t *testing.T) {
	good := makeState(t, 16)
	orig, err := os.ReadFile(filepath.Join(good, DBFile))
	if err != nil {
		t.Fatal(err)
	}
	pageSize, _ := metaOf(t, orig)
	refused := 0
	for p := 2; p < len(orig)/pageSize; p++ {
		for _, field := range []struct {
			off   int
			value uint16
		}{{10, 0xffff}, {8, 0x20}} {
			b := append([]byte(nil), orig...)
			binary.NativeEndian.PutUint16(b[p*pageSize+field.off:], field.value)
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, DBFile), b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := openDamaged(t, dir); err != nil {
				if !strings.Contains(err.Error(), "is damaged") {
					t.Errorf("page %d: %v", p, err)
				}
				refused++
			}
			if _, err := CheckState(dir, time.Second); err != nil {
				t.Errorf("page %d: check-state: %v", p, err)
			}
		}
	}
	if refused == 0 {
		t.Error("no damaged page was found")
	}
	t.Logf("%d pages, %d damaged copies refused", len(orig)/pageSize, refused)
}

// TestDamageWhileOpenIsAnError: a page damaged under an open store (the
// file changed by another hand) makes the next read an error, not a
// panic; the store is marked damaged and every later call fails at once.
func TestDamageWhileOpenIsAnError(t *testing.T) {
	dir := t.TempDir()
	s := openTestBolt(t, dir)
	id := "s_victim"
	if err := s.Create(&Session{ID: id, UserPrompt: strings.Repeat("pay the bill ", 250), Status: StatusActive}); err != nil {
		t.Fatal(err)
	}
	damageRoot(t, dir)
	_, err := s.Get(id)
	var d *DamageError
	if !errors.As(err, &d) || s.Damaged() == nil {
		t.Fatalf("get: %v", err)
	}
	if _, err := s.Get(id); err == nil || err.Error() != s.Damaged().Error() {
		t.Errorf("a later call: %v", err)
	}
	if err := s.Delete(id); err == nil || err.Error() != s.Damaged().Error() {
		t.Errorf("a later delete: %v", err)
	}
}

// openTestBolt opens a store in dir, closed at the test's end.
func openTestBolt(t *testing.T, dir string) *Bolt {
	t.Helper()
	s, err := Open(dir, Options{LockWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// damageRoot sets the element count of the root page of DIR/sessions.db
// to 0xffff under whoever has it open.
func damageRoot(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, DBFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pageSize, root := metaOf(t, data)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var count [2]byte
	binary.NativeEndian.PutUint16(count[:], 0xffff)
	if _, err := f.WriteAt(count[:], int64(root*pageSize+10)); err != nil {
		t.Fatal(err)
	}
}

// TestDamageFoundByTheListIsAnError: when the first read of a damaged
// database is a list, it too is a *DamageError that marks the store
// damaged, not a panic (the list once read the database outside the
// store's guard).
func TestDamageFoundByTheListIsAnError(t *testing.T) {
	dir := t.TempDir()
	s := openTestBolt(t, dir)
	if err := s.Create(&Session{ID: "s_a", UserPrompt: strings.Repeat("pay the bill ", 250), Status: StatusActive}); err != nil {
		t.Fatal(err)
	}
	damageRoot(t, dir)
	if _, err := s.List(ListQuery{All: true, Limit: 10}); !errors.As(err, new(*DamageError)) {
		t.Errorf("list: %v", err)
	}
	if s.Damaged() == nil {
		t.Error("the store is not marked damaged")
	}
}

// TestCheckStateNamesAnUnreadableSession: one session's stored JSON
// damaged (the file's structure whole): --check-state reports the other
// sessions readable and names that one; serving refuses the file.
func TestCheckStateNamesAnUnreadableSession(t *testing.T) {
	dir := makeState(t, 3)
	db, err := bolt.Open(filepath.Join(dir, DBFile), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	var victim string
	db.Update(func(tx *bolt.Tx) error {
		k, _ := tx.Bucket(sessionsBucket).Cursor().First()
		victim = string(k)
		return tx.Bucket(sessionsBucket).Put(k, []byte(`{"id": `))
	})
	db.Close()
	rep, err := CheckState(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sessions != 2 || rep.Steps != 4 || rep.Problems != 1 || !strings.Contains(rep.String(), victim) {
		t.Errorf("report %s", rep)
	}
	if _, err := Open(dir, Options{LockWait: time.Second}); err == nil || !strings.Contains(err.Error(), victim) {
		t.Errorf("open: %v", err)
	}
}

// TestAPanicInOpenReleasesTheFile: a damaged page that makes bbolt panic
// inside Open (here the freelist page's flags, which CheckFile would have
// refused first) is an error, and the file is closed with its lock: the
// process can open it again at once (before, the descriptor and the
// exclusive flock stayed held until the process ended).
func TestAPanicInOpenReleasesTheFile(t *testing.T) {
	dir := makeState(t, 2)
	path := filepath.Join(dir, DBFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := parseMeta(data)
	if m1 := parseMeta(data[m.pageSize:]); m1.valid && m1.txid > m.txid {
		m = m1
	}
	binary.NativeEndian.PutUint16(data[int(m.freelist)*int(m.pageSize)+8:], 0x02) // a leaf's flags
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	fds := func() int { e, _ := os.ReadDir("/proc/self/fd"); return len(e) }
	before := fds()
	if db, err := openBolt(path, bolt.Options{Timeout: time.Second}); !errors.As(err, new(*DamageError)) {
		if db != nil {
			db.Close()
		}
		t.Fatalf("open: %v, want a *DamageError", err)
	}
	if after := fds(); after > before {
		t.Errorf("%d descriptors open after the failed open, %d before", after, before)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 200 * time.Millisecond, ReadOnly: true})
	if err != nil {
		t.Fatalf("opening the file again: %v (its lock is still held)", err)
	}
	db.Close()
}
