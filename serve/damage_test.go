package serve

import (
	"strings"
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
