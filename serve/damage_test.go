package serve

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/mageguard/mageguard/serve/store"
)

// damagedStore is a store found damaged: every call fails with the damage.
type damagedStore struct {
	store.Store
	err error
}

func (d damagedStore) Get(string) (*Session, error)                  { return nil, d.err }
func (d damagedStore) GetWithSteps(string) (*Session, []Step, error) { return nil, nil, d.err }
func (d damagedStore) List(store.ListQuery) (store.Page, error)      { return store.Page{}, d.err }
func (d damagedStore) Create(*Session) error                         { return d.err }
func (d damagedStore) Damaged() error                                { return d.err }

// TestADamagedStoreIs503: with the store found damaged, /healthz answers
// 503 "damaged", and a session's read, the list and a create 503
// store_damaged.
func TestADamagedStoreIs503(t *testing.T) {
	err := &store.DamageError{Path: "sessions.db", Problem: "reading it failed"}
	ts := startTestServer(t, Options{Config: DefaultConfig(), Token: testToken, Store: damagedStore{store.NewMemory(), err}}, testToken, false)
	if code, body := ts.doWith("GET", "/healthz", nil, nil); code != 503 || !strings.Contains(string(body), "damaged") {
		t.Errorf("healthz: %d %s", code, body)
	}
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/sessions/s_aaaaaaaaaaaaaaaaaaaaaaaaaa"},
		{"GET", "/v1/sessions"},
		{"POST", "/v1/sessions"},
	} {
		var body any
		if r.method == "POST" {
			body = map[string]any{"user_prompt": "p"}
		}
		if code, out := ts.do(r.method, r.path, body); code != 503 || !strings.Contains(string(out), "store_damaged") {
			t.Errorf("%s %s: %d %s", r.method, r.path, code, out)
		}
	}
}

// fullStore is a store on a full disk: creates and deletes fail with err.
type fullStore struct {
	store.Store
	err error
}

func (f fullStore) Create(*Session) error { return f.err }
func (f fullStore) Delete(string) error   { return f.err }

// TestAFullDiskIsStoreFailed: a create or a delete the store cannot write
// for a full disk is 500 store_failed (not internal), saying that a
// delete works while the space kept for deletes is there, and that an
// operator must free space once it is used; any other failure of the
// store is 500 store_failed too.
func TestAFullDiskIsStoreFailed(t *testing.T) {
	enospc := &os.PathError{Op: "write", Path: "sessions.db", Err: syscall.ENOSPC}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"reserve kept", &store.DiskFullError{Dir: "state", Reserve: true, Err: enospc}, "delete finished sessions (DELETE /v1/sessions/{id}: space is kept for deletes)"},
		{"reserve used", &store.DiskFullError{Dir: "state", Err: enospc}, "an operator must free space on that disk"},
		{"another failure", errors.New("i/o error"), "could not be read or written"},
	} {
		mem := store.NewMemory()
		if err := mem.Create(&Session{ID: "s_aaaaaaaaaaaaaaaaaaaaaaaaaa", Owner: OperatorName, Status: StatusActive}); err != nil {
			t.Fatal(err)
		}
		ts := startTestServer(t, Options{Config: DefaultConfig(), Token: testToken, Store: fullStore{mem, c.err}}, testToken, false)
		for _, r := range []struct{ method, path string }{{"POST", "/v1/sessions"}, {"DELETE", "/v1/sessions/s_aaaaaaaaaaaaaaaaaaaaaaaaaa"}} {
			var body any
			if r.method == "POST" {
				body = map[string]any{"user_prompt": "p"}
			}
			code, out := ts.do(r.method, r.path, body)
			if e := decode[ErrorBody](t, out).Error; code != 500 || e.Code != "store_failed" || !strings.Contains(e.Message, c.want) {
				t.Errorf("%s: %s %s: %d %s", c.name, r.method, r.path, code, out)
			}
		}
	}
}
