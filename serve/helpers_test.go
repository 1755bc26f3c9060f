package serve

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/serve/store"
)

// fakeModel is a scripted generator with the guard's real prompts, parser
// and fallbacks around it. The memory writes "m1" at a session's first
// step and appends "+" to the memory it is shown after that; the judge
// rejects send_money (score 0.9) and approves the rest (score 0.3). With a
// gate, every generation call waits for the gate to be closed, after
// telling entered.
type fakeModel struct {
	*guardtest.Scripted
	gate    chan struct{}
	entered chan struct{}
}

func newFakeModel(tok *tokenizer.Tokenizer) *fakeModel {
	return &fakeModel{Scripted: &guardtest.Scripted{
		Tok: tok,
		Reply: func(_ generate.Request, p string) (string, error) {
			switch {
			case strings.Contains(p, "Update the memory"):
				return guardtest.MemoryCall(guardtest.GrowMemory(p, "m1")), nil
			case strings.Contains(p, `"name": "send_money"`):
				return guardtest.JudgeCall("reject", "money to a stranger"), nil
			case strings.Contains(p, `"name": "garbage"`):
				return "not a tool call", nil
			}
			return guardtest.JudgeCall("approve", "fine"), nil
		},
		Watch: func(r generate.Request, p string) []float32 {
			if !strings.Contains(p, "Update the memory") && strings.Contains(p, `"name": "send_money"`) {
				return guardtest.DecisionWatch(tok, r.Watch, 0.1, 0.9)
			}
			return guardtest.DecisionWatch(tok, r.Watch, 0.7, 0.3)
		},
	}}
}

// Generate implements generate.Generator, behind the gate when there is one.
func (f *fakeModel) Generate(reqs []generate.Request, s generate.Sampling) ([]generate.Completion, error) {
	if f.gate != nil {
		select {
		case f.entered <- struct{}{}:
		default:
		}
		<-f.gate
	}
	return f.Scripted.Generate(reqs, s)
}

// calls returns the rows of each generation call so far.
func (f *fakeModel) calls() []int { return f.Batches() }

// testServer is a Server over a store in memory (or, from
// newDiskTestServer, in a temporary directory), with a guard on a
// fakeModel, served by httptest.
type testServer struct {
	t     *testing.T
	srv   *Server
	http  *httptest.Server
	model *fakeModel
	store store.Store
	dir   string // the store's directory ("": in memory)
	token string
}

const testToken = "test-token-0123456789"

func newTestServer(t *testing.T, cfg Config, gated bool) *testServer {
	t.Helper()
	return startTestServer(t, Options{Config: cfg, Token: testToken}, testToken, gated)
}

// newDiskTestServer is newTestServer over a store in a temporary
// directory (ts.dir).
func newDiskTestServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(dir, store.Options{LockWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ts := startTestServer(t, Options{Config: cfg, Token: testToken, Store: st}, testToken, false)
	ts.dir = dir
	return ts
}

// startTestServer serves the fake model with o (its Rollout filled in
// here, its Store when nil with a new store in memory); token is the one
// ts.do sends.
func startTestServer(t *testing.T, o Options, token string, gated bool) *testServer {
	t.Helper()
	if o.Store == nil {
		o.Store = store.NewMemory()
	}
	ts := &testServer{t: t, store: o.Store, token: token}
	ts.model = newFakeModel(guardtest.Tokenizer(t))
	if gated {
		ts.model.gate, ts.model.entered = make(chan struct{}), make(chan struct{}, 16)
	}
	o.Rollout = rollout.DefaultConfig()
	var err error
	ts.srv, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := rollout.NewGuard(rollout.DefaultConfig(), ts.model.Tok, ts.model)
	if err != nil {
		t.Fatal(err)
	}
	ts.srv.SetGuard(guard)
	ts.http = httptest.NewServer(ts.srv.Handler())
	t.Cleanup(func() {
		if ts.model.gate != nil {
			ts.open()
		}
		ts.http.Close()
		ts.srv.Close()
		ts.store.Close()
	})
	return ts
}

// open releases a gated model.
func (ts *testServer) open() {
	select {
	case <-ts.model.gate:
	default:
		close(ts.model.gate)
	}
}

// do sends a request with the test token and returns the status and body.
func (ts *testServer) do(method, path string, body any) (int, []byte) {
	ts.t.Helper()
	return ts.doWith(method, path, body, map[string]string{"Authorization": "Bearer " + ts.token})
}

func (ts *testServer) doWith(method, path string, body any, header map[string]string) (int, []byte) {
	ts.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			ts.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, ts.http.URL+path, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	return resp.StatusCode, data
}

// create starts a session and returns its id.
func (ts *testServer) create(prompt string) string {
	ts.t.Helper()
	code, body := ts.do("POST", "/v1/sessions", map[string]any{"user_prompt": prompt})
	if code != 201 {
		ts.t.Fatalf("create: %d %s", code, body)
	}
	var r struct{ ID string }
	if err := json.Unmarshal(body, &r); err != nil || !validID(r.ID) {
		ts.t.Fatalf("create: %s", body)
	}
	return r.ID
}

func assessBody(name, args string, obs *string) map[string]any {
	b := map[string]any{"action": map[string]any{"name": name, "arguments": json.RawMessage(args)}}
	if obs != nil {
		b["observation"] = *obs
	}
	return b
}

func decode[T any](t *testing.T, data []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	return v
}

func str(s string) *string { return &s }
