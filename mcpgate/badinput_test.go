package mcpgate

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestRefusedCalls: a call the gateway refuses gets a tool result with
// isError naming what is wrong (as an SDK server reports an unknown tool
// or bad arguments), reaches neither the guard nor the downstream, is
// audited, and the session goes on.
func TestRefusedCalls(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, Options{})
	c := h.connect(ctx)
	for _, tc := range []struct {
		name string
		tool string
		args any
		want string
	}{
		{"a tool the downstream does not list", "delete_everything", map[string]any{}, `mageguard: unknown tool "delete_everything": the downstream MCP server does not list it; the call was not run`},
		{"arguments that are no object", "read_file", []int{1}, "mageguard: arguments: want a JSON object; the call was not run"},
		{"a key given twice", "read_file", json.RawMessage(`{"path": "a", "path": "notes.txt"}`), "mageguard: arguments.path: given twice; the call was not run"},
	} {
		res, err := c.call(ctx, tc.tool, tc.args, nil)
		if err != nil || !res.IsError || text(res) != tc.want {
			t.Errorf("%s: %v %+v, want the error result %q", tc.name, err, res, tc.want)
		}
	}
	var we *jsonrpc.Error
	if _, err := c.call(ctx, "read_file", map[string]any{"path": "x"}, mcp.Meta{MetaUserPrompt: 1}); !errors.As(err, &we) || we.Code != codeInvalidParams {
		t.Errorf("a _meta user prompt that is no string: %v", err)
	}
	if got := h.down.called(); len(got) != 0 {
		t.Errorf("the downstream got %v", got)
	}
	if n := len(h.model.Batches()); n != 0 {
		t.Errorf("the guard ran %d generations", n)
	}
	recs := h.records()
	if len(recs) != 3 || recs[0].Tool != "delete_everything" || recs[0].Forwarded || recs[0].Error == "" || recs[2].Error != "arguments.path: given twice" {
		t.Errorf("audit: %+v", recs)
	}
	if res, err := c.call(ctx, "read_file", map[string]any{"path": "notes.txt"}, nil); err != nil || res.IsError {
		t.Errorf("a good call after the refusals: %v %+v", err, res)
	}
}

// TestDownstreamDiesMidCall: the call in progress gets an error, the
// client's session is closed (it must reconnect), and the audit log has
// the forwarded call and its failure.
func TestDownstreamDiesMidCall(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, Options{})
	c := h.connect(ctx)
	_, err := c.call(ctx, "die", map[string]any{}, nil)
	if err == nil {
		t.Fatal("no error")
	}
	done := make(chan error, 1)
	go func() { done <- c.cs.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway kept the client's session open")
	}
	guardtest.WaitFor(t, "the session to go", func() bool { return h.gw.Sessions() == 0 })
	recs := h.records()
	if len(recs) != 2 || !recs[0].Forwarded || recs[1].Event != EventOutcome || recs[1].Error == "" {
		t.Errorf("audit: %+v", recs)
	}
}

// TestClientDisconnectsMidCall: the downstream's call is cancelled, its
// session closed, and the outcome audited.
func TestClientDisconnectsMidCall(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, Options{})
	c := h.connect(ctx)
	go c.call(ctx, "hang", map[string]any{}, nil)
	guardtest.WaitFor(t, "the downstream to get the call", func() bool { return slices.Contains(h.down.called(), "hang") })
	c.cut()
	select {
	case <-h.down.cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the downstream's call was not cancelled")
	}
	guardtest.WaitFor(t, "the session to go", func() bool { return h.gw.Sessions() == 0 })
	guardtest.WaitFor(t, "the outcome", func() bool { return len(h.records()) == 2 })
	if r := h.records()[1]; r.Event != EventOutcome || r.Error == "" {
		t.Errorf("outcome: %+v", r)
	}
}

// TestMalformedJSONRPC: over a raw stream, messages of the wrong shape get
// JSON-RPC errors and the session goes on; text that is no JSON ends it.
func TestMalformedJSONRPC(t *testing.T) {
	h := newHarness(t, Options{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	if _, err := h.gw.Server().Connect(context.Background(), &mcp.IOTransport{Reader: inR, Writer: outW}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inW.Close() })
	lines := bufio.NewScanner(outR)
	send := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(inW, msg+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	type reply struct {
		ID     any             `json:"id"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	read := func() reply {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("no reply: %v", lines.Err())
		}
		var r reply
		if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", lines.Bytes(), err)
		}
		return r
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if r := read(); r.Error != nil {
		t.Fatalf("initialize: %+v", r.Error)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	for _, c := range []struct {
		msg  string
		code int
	}{
		{`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":5}}`, codeInvalidParams},
		{`{"jsonrpc":"2.0","id":3,"method":"no/such/method","params":{}}`, -32601},
	} {
		send(c.msg)
		if r := read(); r.Error == nil || r.Error.Code != c.code {
			t.Errorf("%s: reply %+v, want code %d", c.msg, r.Error, c.code)
		}
	}
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read_file","arguments":{"path":"notes.txt"}}}`)
	if r := read(); r.Error != nil || !strings.Contains(string(r.Result), "Meeting at 10") {
		t.Errorf("a good call after the bad ones: %+v %s", r.Error, r.Result)
	}
	// Text that is no JSON: a stream cannot be read past it, so the
	// session ends, and its downstream session with it.
	send(`{"jsonrpc":"2.0","id":6,"method":"tools/call",,,}`)
	if lines.Scan() {
		t.Errorf("a reply to text that is no JSON: %s", lines.Bytes())
	}
	guardtest.WaitFor(t, "the session to end", func() bool { return h.gw.Sessions() == 0 })
}

// TestGuardSessionGone: a guard session deleted under its client session
// (by an operator, or expired) leaves the client's calls refused, not run
// on a fresh memory.
func TestGuardSessionGone(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, Options{})
	c := h.connect(ctx)
	if _, err := c.call(ctx, "read_file", map[string]any{"path": "notes.txt"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.store.Delete(h.records()[0].Session); err != nil {
		t.Fatal(err)
	}
	res, err := c.call(ctx, "read_file", map[string]any{"path": "notes.txt"}, nil)
	if err != nil || !res.IsError || !strings.Contains(text(res), "no longer exists") || len(h.down.called()) != 1 {
		t.Errorf("a call after the guard session was deleted: %v %q, downstream got %v", err, text(res), h.down.called())
	}
}

// TestRefusalsQuoteLittle: what the gateway refuses of a client's own
// text — a 100 KB name of a tool the downstream does not list, a 50 KB
// Host or Origin — is quoted by its first 64 bytes, in the answer and the
// audit record.
func TestRefusalsQuoteLittle(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, Options{})
	c := h.connect(ctx)
	long := strings.Repeat("x", 100_000)
	res, err := c.call(ctx, long, map[string]any{}, nil)
	if want := `mageguard: unknown tool "` + long[:64] + `…": the downstream MCP server does not list it; the call was not run`; err != nil || !res.IsError || text(res) != want {
		t.Errorf("a long unknown tool: %v %.300s", err, text(res))
	}
	if recs := h.records(); len(recs) != 1 || recs[0].Tool != long[:64]+"…" {
		t.Errorf("audit: %d records, tool %.100q", len(recs), recs[0].Tool)
	}
	for _, header := range []string{"Host", "Origin"} {
		r := httptest.NewRequest("POST", "/mcp", nil)
		r.Host = "localhost"
		if header == "Host" {
			r.Host = strings.Repeat("h", 50_000)
		} else {
			r.Header.Set("Origin", "http://"+strings.Repeat("o", 50_000))
		}
		w := httptest.NewRecorder()
		CheckOrigin(nil, false, http.NotFoundHandler()).ServeHTTP(w, r)
		if w.Code != 403 || w.Body.Len() > 300 {
			t.Errorf("a long %s: %d, %d bytes", header, w.Code, w.Body.Len())
		}
	}
}
