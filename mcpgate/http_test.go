package mcpgate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/serve"
)

const (
	tokenA  = "agent-a-token-0123456789"
	tokenB  = "agent-b-token-0123456789"
	tokenOp = "operator-token-0123456789"
)

func testTokens(t *testing.T) *serve.Tokens {
	t.Helper()
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	tokens, err := serve.ParseTokens([]byte(fmt.Sprintf("tokens:\n  - {name: a, role: agent, sha256: %s}\n  - {name: b, role: agent, sha256: %s}\n  - {name: op, role: operator, sha256: %s}\n",
		sum(tokenA), sum(tokenB), sum(tokenOp))))
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

// bearer adds a bearer token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// rawRequest sends one HTTP request to the test server.
func rawRequest(t *testing.T, method, url, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// TestHTTPTenants: over Streamable HTTP, a client session belongs to the
// token that opened it: its guard session is owned by the token's name,
// another agent can use neither the client session nor the guard session,
// and the operator reads the guard session through the API.
func TestHTTPTenants(t *testing.T) {
	ctx := context.Background()
	tokens := testTokens(t)
	h := newHarness(t, Options{Task: "Summarise notes.txt"}, tokens)
	srv := httptest.NewServer(h.gw.HTTPHandler(HTTPOptions{Tokens: tokens, API: h.guard.Handler()}))
	defer srv.Close()

	cl := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{tokenA}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "notes.txt"}}); err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "write_file", Arguments: map[string]any{"path": "x", "content": "y"}})
	if err != nil || !res.IsError {
		t.Fatalf("write_file: %v %+v", err, res)
	}
	guardID := h.records()[0].Session
	if sess, err := h.store.Get(guardID); err != nil || sess.Owner != "a" {
		t.Fatalf("the guard session: %+v %v", sess, err)
	}

	mcpURL := srv.URL + "/mcp"
	tools := `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}`
	for _, c := range []struct {
		name, method, url, body string
		header                  map[string]string
		status                  int
	}{
		{"no token", "POST", mcpURL, initBody, nil, 401},
		{"a wrong token", "POST", mcpURL, initBody, map[string]string{"Authorization": "Bearer nope-nope-nope-nope"}, 401},
		{"b on a's client session", "POST", mcpURL, tools, map[string]string{"Authorization": "Bearer " + tokenB, "Mcp-Session-Id": cs.ID(), "Mcp-Protocol-Version": "2025-11-25"}, 403},
		{"b reads a's guard session", "GET", srv.URL + "/v1/sessions/" + guardID, "", map[string]string{"Authorization": "Bearer " + tokenB}, 404},
		{"b resumes a's guard session", "POST", srv.URL + "/v1/sessions/" + guardID + "/resume", "", map[string]string{"Authorization": "Bearer " + tokenB}, 404},
		{"the operator reads it", "GET", srv.URL + "/v1/sessions/" + guardID, "", map[string]string{"Authorization": "Bearer " + tokenOp}, 200},
		{"a body that is no JSON", "POST", mcpURL, `{"jsonrpc":`, map[string]string{"Authorization": "Bearer " + tokenA}, 400},
	} {
		if code, body := rawRequest(t, c.method, c.url, c.body, c.header); code != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.status)
		}
	}
	if code, body := rawRequest(t, "POST", srv.URL+"/v1/sessions/"+guardID+"/resume", "", map[string]string{"Authorization": "Bearer " + tokenOp}); code != 200 {
		t.Errorf("the operator resumes a's session: %d %s", code, body)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "notes.txt"}}); err != nil || res.IsError {
		t.Errorf("a goes on after the resume: %v %+v", err, res)
	}
}

// TestDNSRebinding: a Host or Origin of another site is refused before
// anything else; loopback's pass.
func TestDNSRebinding(t *testing.T) {
	h := newHarness(t, Options{})
	srv := httptest.NewServer(h.gw.HTTPHandler(HTTPOptions{API: h.guard.Handler()}))
	defer srv.Close()
	port := srv.URL[strings.LastIndex(srv.URL, ":"):]
	for _, c := range []struct {
		name   string
		header map[string]string
		status int
	}{
		{"another site's Host", map[string]string{"Host": "evil.example.com" + port, "Origin": "http://evil.example.com" + port}, 403},
		{"another site's Host alone", map[string]string{"Host": "evil.example.com"}, 403},
		{"another site's Origin", map[string]string{"Origin": "http://evil.example.com"}, 403},
		{"Origin null", map[string]string{"Origin": "null"}, 403},
		{"localhost", map[string]string{"Host": "localhost" + port, "Origin": "http://localhost" + port}, 200},
		{"127.0.0.1", map[string]string{"Origin": "http://127.0.0.1" + port}, 200},
		{"[::1]", map[string]string{"Host": "[::1]" + port}, 200},
	} {
		if code, body := rawRequest(t, "POST", srv.URL+"/mcp", initBody, c.header); code != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.status)
		}
	}
	if code, _ := rawRequest(t, "GET", srv.URL+"/healthz", "", map[string]string{"Host": "evil.example.com"}); code != 403 {
		t.Errorf("the API behind another site's Host: %d", code)
	}
	// Allowed names, and any host for a server listening beyond loopback.
	allowed := CheckOrigin([]string{"Guard.Example"}, false, http.NotFoundHandler())
	anyHost := CheckOrigin(nil, true, http.NotFoundHandler())
	for _, c := range []struct {
		h            http.Handler
		host, origin string
		status       int
	}{
		{allowed, "guard.example:8443", "https://guard.example:8443", 404},
		{allowed, "other.example", "", 403},
		{anyHost, "10.0.0.5:8080", "http://10.0.0.5:8080", 404},
		{anyHost, "10.0.0.5:8080", "http://evil.example.com", 403},
	} {
		r := httptest.NewRequest("POST", "/mcp", nil)
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		w := httptest.NewRecorder()
		c.h.ServeHTTP(w, r)
		if w.Code != c.status {
			t.Errorf("Host %s Origin %q: %d, want %d", c.host, c.origin, w.Code, c.status)
		}
	}
}
