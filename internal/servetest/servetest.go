// Package servetest is what the code that starts `mageguard serve` (or
// `mcp --listen`) and drives it from outside shares: a buffer for the
// server's log that a poller reads while the server writes (SyncBuffer),
// a wait for a condition with a time limit (PollUntil), a JSON client of
// serve's API (Client) and the assess request of a recorded turn
// (AssessTurn). cmd/mageguard's tests, internal/replay, scripts/serve-load
// and scripts/replay-e2e use it.
package servetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/mageguard/mageguard/dataset"
)

// TB is the part of testing.TB this package uses; a *testing.T and a
// scripts/internal/check T both have it.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// SyncBuffer is a bytes.Buffer safe for a writer and a poller.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// PollUntil calls cond every few milliseconds until it returns true, and
// fails t after limit.
func PollUntil(t TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Client is an agent's or an operator's side of serve's API.
type Client struct {
	Base  string       // the server's URL, e.g. "http://127.0.0.1:8080"
	Token string       // the bearer token; no Authorization header when empty (--insecure-no-auth)
	HTTP  *http.Client // nil: http.DefaultClient, without a time limit
}

// ErrNoAnswer is wrapped by the errors of Do when the server did not
// answer: the request could not be sent or the answer could not be read.
var ErrNoAnswer = errors.New("the server did not answer")

// Do sends body (JSON, when not nil) and returns the answer's status and
// body, whatever the status.
func (c *Client) Do(method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.Base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrNoAnswer, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrNoAnswer, err)
	}
	return resp.StatusCode, data, nil
}

// Call is Do for a test: an error fails t, a 2xx answer is decoded into
// out (when not nil) and any other answer is logged with its body. It
// returns the status.
func (c *Client) Call(t TB, method, path string, body, out any) int {
	t.Helper()
	code, data, err := c.Do(method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	if code >= 300 {
		t.Logf("%s %s: %d %s", method, path, code, data)
	} else if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %s: %v", method, path, data, err)
		}
	}
	return code
}

// AssessTurn is the assess request of turn i of tr: its action, the
// previous turn's observation and the user message that came before it.
// It has no "step": callers that send one add it.
func AssessTurn(tr *dataset.Trajectory, i int) map[string]any {
	body := map[string]any{"action": tr.Turns[i].Action}
	if i > 0 {
		body["observation"] = tr.Turns[i-1].Observation
	}
	if u := tr.Turns[i].User; u != nil {
		body["user_messages"] = []string{*u}
	}
	return body
}
