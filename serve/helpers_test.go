package serve

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
)

var (
	tokOnce sync.Once
	tokVal  *tokenizer.Tokenizer
	tokErr  error
)

func qwenTokenizer(t testing.TB) *tokenizer.Tokenizer {
	tokOnce.Do(func() { tokVal, tokErr = tokenizer.Load("../assets/qwen3") })
	if tokErr != nil {
		t.Fatal(tokErr)
	}
	return tokVal
}

// fakeModel is a scripted generator with the guard's real prompts, parser
// and fallbacks around it. The memory writes "m1" at a session's first
// step and appends "+" to the memory it is shown after that; the judge
// rejects send_money (score 0.9) and approves the rest (score 0.3). With a
// gate, every generation call waits for the gate to be closed, after
// telling entered.
type fakeModel struct {
	tok     *tokenizer.Tokenizer
	gate    chan struct{}
	entered chan struct{}

	mu      sync.Mutex
	batches []int // rows of each generation call
}

const (
	memCall   = "<tool_call>\n{\"name\": \"update_memory\", \"arguments\": {\"content\": \"%s\"}}\n</tool_call>"
	judgeCall = "<tool_call>\n{\"name\": \"assess_risk\", \"arguments\": {\"decision\": \"%s\", \"rationale\": \"%s\"}}\n</tool_call>"
)

func (f *fakeModel) Generate(reqs []generate.Request, _ generate.Sampling) ([]generate.Completion, error) {
	if f.gate != nil {
		select {
		case f.entered <- struct{}{}:
		default:
		}
		<-f.gate
	}
	f.mu.Lock()
	f.batches = append(f.batches, len(reqs))
	f.mu.Unlock()
	end, _ := f.tok.TokenID("<|im_end|>")
	approveID, _ := f.tok.TokenID("approve")
	rejectID, _ := f.tok.TokenID("reject")
	var out []generate.Completion
	for _, r := range reqs {
		p := f.tok.Decode(r.Prompt, false)
		var text string
		pa, pr := 0.7, 0.3
		switch {
		case strings.Contains(p, "Update the memory"):
			mem := "m1"
			if i := strings.Index(p, "Current memory:\n<memory>\n"); i >= 0 && !strings.HasPrefix(p[i+len("Current memory:\n<memory>\n"):], "(empty)") {
				rest := p[i+len("Current memory:\n<memory>\n"):]
				mem = rest[:strings.Index(rest, "\n</memory>")] + "+"
			}
			text = strings.Replace(memCall, "%s", mem, 1)
		case strings.Contains(p, `"name": "send_money"`):
			text = strings.Replace(strings.Replace(judgeCall, "%s", "reject", 1), "%s", "money to a stranger", 1)
			pa, pr = 0.1, 0.9
		case strings.Contains(p, `"name": "garbage"`):
			text = "not a tool call"
		default:
			text = strings.Replace(strings.Replace(judgeCall, "%s", "approve", 1), "%s", "fine", 1)
		}
		ids := append(f.tok.Encode(text), end)
		c := generate.Completion{Tokens: ids, LogProbs: make([]float32, len(ids)), Forced: make([]bool, len(ids))}
		if len(r.Watch) > 0 {
			for range ids {
				row := make([]float32, len(r.Watch))
				for k, id := range r.Watch {
					switch id {
					case approveID:
						row[k] = float32(math.Log(pa))
					case rejectID:
						row[k] = float32(math.Log(pr))
					default:
						row[k] = float32(math.Inf(-1))
					}
				}
				c.Watch = append(c.Watch, row)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func (f *fakeModel) calls() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.batches...)
}

// testServer is a Server over a store in a temporary directory, with a
// guard on a fakeModel, served by httptest.
type testServer struct {
	t     *testing.T
	srv   *Server
	http  *httptest.Server
	model *fakeModel
	store *Store
	dir   string
	token string
}

const testToken = "test-token-0123456789"

func newTestServer(t *testing.T, cfg Config, gated bool) *testServer {
	t.Helper()
	dir := t.TempDir()
	store, err := OpenStore(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{t: t, store: store, dir: dir, token: testToken}
	ts.model = &fakeModel{tok: qwenTokenizer(t)}
	if gated {
		ts.model.gate, ts.model.entered = make(chan struct{}), make(chan struct{}, 16)
	}
	ts.srv, err = New(Options{Config: cfg, Rollout: rollout.DefaultConfig(), Store: store, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := rollout.NewGuard(rollout.DefaultConfig(), ts.model.tok, ts.model)
	if err != nil {
		t.Fatal(err)
	}
	ts.srv.SetGuard(guard)
	ts.http = httptest.NewServer(ts.srv.Handler())
	t.Cleanup(func() {
		if ts.model.gate != nil {
			select {
			case <-ts.model.gate:
			default:
				close(ts.model.gate)
			}
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

// waitFor polls cond until it holds (bounded: fails the test after 10 s).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
