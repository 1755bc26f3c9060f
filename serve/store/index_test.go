package store

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestAListReadsOnlyItsPage: beside agent a's 250 sessions of 1 MB, agent
// b's list (one session of its own) and an operator's page of 10 read
// their page alone: b's allocates less than one of a's prompts would
// take to decode, the operator's less than 20 of them (the list read every
// session before, 250 MB for any caller).
func TestAListReadsOnlyItsPage(t *testing.T) {
	s := openTestBolt(t, t.TempDir())
	prompt := strings.Repeat("p", 1<<20)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 250 {
		if err := s.Create(&Session{ID: fmt.Sprintf("s_a%03d", i), Owner: "a", UserPrompt: prompt, CreatedAt: t0.Add(time.Duration(i) * time.Second), Status: StatusActive}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Create(&Session{ID: "s_b", Owner: "b", UserPrompt: "b's task", CreatedAt: t0.Add(time.Hour), Status: StatusActive}); err != nil {
		t.Fatal(err)
	}
	alloc := func(q ListQuery) (Page, uint64) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		p, err := s.List(q)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		return p, after.TotalAlloc - before.TotalAlloc
	}
	p, bBytes := alloc(ListQuery{Owner: "b", Limit: 100})
	if len(p.Sessions) != 1 || p.Sessions[0].ID != "s_b" || p.Next != "" {
		t.Fatalf("b's list: %+v", p)
	}
	if bBytes >= 1<<20 {
		t.Errorf("b's list allocated %d bytes: it read a's sessions", bBytes)
	}
	p, opBytes := alloc(ListQuery{All: true, Limit: 10})
	if len(p.Sessions) != 10 || p.Sessions[9].ID != "s_a009" || p.Next == "" {
		t.Fatalf("the operator's page: %d sessions, next %q", len(p.Sessions), p.Next)
	}
	if opBytes >= 20<<20 {
		t.Errorf("the operator's page of 10 allocated %d bytes", opBytes)
	}
	t.Logf("b's list: %d bytes allocated; the operator's page of 10: %d", bBytes, opBytes)
}

// TestAFileWithoutIndexesLists: a sessions.db written before the list's
// indexes (here: with them dropped), or with an index entry missing, lists
// every session read-only (by reading them all) and has its indexes
// rebuilt at a read-write open.
func TestAFileWithoutIndexesLists(t *testing.T) {
	for name, damage := range map[string]func(tx *bolt.Tx) error{
		"no indexes": func(tx *bolt.Tx) error {
			if err := tx.DeleteBucket(createdBucket); err != nil {
				return err
			}
			return tx.DeleteBucket(ownersBucket)
		},
		"an entry missing": func(tx *bolt.Tx) error {
			k, _ := tx.Bucket(ownersBucket).Cursor().First()
			return tx.Bucket(ownersBucket).Delete(k)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			s := openTestBolt(t, dir)
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for i, owner := range []string{"a", "b", "a"} {
				if err := s.Create(&Session{ID: fmt.Sprintf("s_%d", i), Owner: owner, CreatedAt: t0.Add(time.Duration(i) * time.Second), Status: StatusActive}); err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			db, err := bolt.Open(filepath.Join(dir, DBFile), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(damage); err != nil {
				t.Fatal(err)
			}
			db.Close()
			list := func(s Store) string {
				p, err := s.List(ListQuery{Owner: "a", Limit: 10})
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, sess := range p.Sessions {
					ids = append(ids, sess.ID)
				}
				return strings.Join(ids, " ")
			}
			ro, err := Open(dir, Options{LockWait: time.Second, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			if got := list(ro); got != "s_0 s_2" || !ro.scan {
				t.Errorf("read-only: %q (scan %v)", got, ro.scan)
			}
			ro.Close()
			rw := openTestBolt(t, dir)
			if got := list(rw); got != "s_0 s_2" || rw.scan {
				t.Errorf("read-write: %q (scan %v)", got, rw.scan)
			}
			if err := rw.view(func(tx *bolt.Tx) error {
				if !indexed(tx, []indexEntry{entryOf(&Session{ID: "s_0", Owner: "a", CreatedAt: t0}),
					entryOf(&Session{ID: "s_1", Owner: "b", CreatedAt: t0.Add(time.Second)}),
					entryOf(&Session{ID: "s_2", Owner: "a", CreatedAt: t0.Add(2 * time.Second)})}) {
					t.Error("the indexes were not rebuilt")
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestALongOwnerIsRefused: an owner name longer than MaxOwnerBytes (1,024)
// is refused by Create (both stores) and by an owner's list, so that no
// wrapped length makes one owner's index prefix start another's (a
// 65,537-byte name would have had the 1-byte name's length, 1).
func TestALongOwnerIsRefused(t *testing.T) {
	long := strings.Repeat("x", 1<<16+1)
	for name, s := range map[string]Store{"bolt": openTestBolt(t, t.TempDir()), "memory": NewMemory()} {
		for _, n := range []int{len(long), MaxOwnerBytes + 1} {
			err := s.Create(&Session{ID: "s_long", Owner: long[:n], UserPrompt: "p", CreatedAt: time.Unix(0, 0), Status: StatusActive})
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("owner name of %d bytes: at most 1024", n)) {
				t.Errorf("%s: a %d-byte owner: %v", name, n, err)
			}
		}
		if err := s.Create(&Session{ID: "s_max", Owner: long[:MaxOwnerBytes], UserPrompt: "p", CreatedAt: time.Unix(0, 0), Status: StatusActive}); err != nil {
			t.Errorf("%s: a %d-byte owner: %v", name, MaxOwnerBytes, err)
		}
		if p, err := s.List(ListQuery{Owner: "x", Limit: 10}); err != nil || len(p.Sessions) != 0 {
			t.Errorf("%s: the 1-byte owner's list: %+v %v", name, p, err)
		}
	}
	if _, err := openTestBolt(t, t.TempDir()).List(ListQuery{Owner: long, Limit: 10}); err == nil {
		t.Errorf("a list of a 65,537-byte owner was not refused")
	}
}
