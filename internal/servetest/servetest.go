// Package servetest is what the code that drives a running `mageguard
// serve` from outside shares: a JSON client of its API (Client) and the
// assess request of a recorded turn (AssessTurn). cmd/mageguard's tests,
// internal/replay and scripts/serve-load use it.
package servetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

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
