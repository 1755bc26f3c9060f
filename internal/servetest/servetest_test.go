package servetest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestClientDo: the request Do sends (JSON body, content type, a bearer
// token only when there is one) and the answer it returns, whatever the
// status. The server answers with what it got.
func TestClientDo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/missing" {
			w.WriteHeader(404)
		}
		fmt.Fprintf(w, "%s %s|%s|%s", r.Method, body, r.Header.Get("Content-Type"), r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	for _, c := range []struct {
		name         string
		token        string
		method, path string
		body         any
		wantCode     int
		wantAnswer   string
	}{
		{"a body and a token", "tok", "POST", "/v1/sessions", map[string]any{"user_prompt": "p"}, 200, `POST {"user_prompt":"p"}|application/json|Bearer tok`},
		{"no body", "tok", "GET", "/v1/sessions", nil, 200, "GET |application/json|Bearer tok"},
		{"no token, no Authorization", "", "GET", "/v1/sessions", nil, 200, "GET |application/json|"},
		{"an error status is an answer", "tok", "GET", "/missing", nil, 404, "GET |application/json|Bearer tok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := &Client{Base: srv.URL, Token: c.token}
			code, data, err := cl.Do(c.method, c.path, c.body)
			if err != nil || code != c.wantCode || string(data) != c.wantAnswer {
				t.Errorf("Do: %d %q %v, want %d %q", code, data, err, c.wantCode, c.wantAnswer)
			}
		})
	}
}

// TestClientDoNoAnswer: a server that is gone is ErrNoAnswer; a body
// that is not JSON is another error.
func TestClientDoNoAnswer(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	cl := &Client{Base: srv.URL}
	if _, _, err := cl.Do("GET", "/healthz", nil); !errors.Is(err, ErrNoAnswer) {
		t.Errorf("closed server: %v, want ErrNoAnswer", err)
	}
	if _, _, err := cl.Do("POST", "/v1/sessions", func() {}); err == nil || errors.Is(err, ErrNoAnswer) {
		t.Errorf("a body that is not JSON: %v, want an error other than ErrNoAnswer", err)
	}
}

// TestClientCall: a 2xx answer is decoded into out, any other is not.
func TestClientCall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.WriteHeader(400)
		}
		w.Write([]byte(`{"id": "s1"}`))
	}))
	defer srv.Close()
	cl := &Client{Base: srv.URL}
	for _, c := range []struct {
		path     string
		wantCode int
		wantID   string
	}{
		{"/v1/sessions", 200, "s1"},
		{"/bad", 400, ""},
	} {
		var out struct{ ID string }
		if code := cl.Call(t, "GET", c.path, nil, &out); code != c.wantCode || out.ID != c.wantID {
			t.Errorf("%s: %d, id %q; want %d, %q", c.path, code, out.ID, c.wantCode, c.wantID)
		}
	}
}

// TestPollUntil: PollUntil returns once cond holds, and fails with what it
// waited for after the limit.
func TestPollUntil(t *testing.T) {
	var buf SyncBuffer
	go fmt.Fprint(&buf, "serve: listening on http://127.0.0.1:1234")
	PollUntil(t, 10*time.Second, "the log line", func() bool { return strings.Contains(buf.String(), "listening") })

	ft := &fatalTB{TB: t}
	func() {
		defer func() { recover() }()
		PollUntil(ft, 20*time.Millisecond, "nothing", func() bool { return false })
	}()
	if want := "timed out after 20ms waiting for nothing"; ft.msg != want {
		t.Errorf("failure %q, want %q", ft.msg, want)
	}
}

// fatalTB records Fatalf's message and stops the caller with a panic.
type fatalTB struct {
	TB
	msg string
}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f.msg)
}
