//lint:file-ignore SA1019 the gateway still forwards MCP's deprecated sampling, whose bounds these tests exercise

package mcpgate

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/internal/guardtest"
)

// TestConfigValidate: every limit of the mcp section is refused outside
// its range, naming its key.
func TestConfigValidate(t *testing.T) {
	if c := DefaultConfig(); c.Validate() != nil {
		t.Fatal(c.Validate())
	}
	cases := []struct {
		key string
		set func(*Config)
	}{
		{"max_list_pages", func(c *Config) { c.MaxListPages = 0 }},
		{"max_list_tools", func(c *Config) { c.MaxListTools = -1 }},
		{"max_list_bytes", func(c *Config) { c.MaxListBytes = 0 }},
		{"max_list_bytes", func(c *Config) { c.MaxListBytes = 64<<20 + 1 }},
		{"max_pending_requests", func(c *Config) { c.MaxPendingRequests = 1 << 21 }},
		{"max_pending_request_bytes", func(c *Config) { c.MaxPendingRequestBytes = 0 }},
		{"max_notifications_per_call", func(c *Config) { c.MaxNotificationsPerCall = 0 }},
		{"max_client_sessions", func(c *Config) { c.MaxClientSessions = 0 }},
		{"max_client_sessions_per_token", func(c *Config) { c.MaxClientSessionsPerToken = 0 }},
		{"max_client_sessions_per_token (65)", func(c *Config) { c.MaxClientSessionsPerToken = 65 }},
	}
	for _, k := range cases {
		c := DefaultConfig()
		k.set(&c)
		if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), k.key) {
			t.Errorf("%s: %v", k.key, err)
		}
	}
}

// initAs sends a raw initialize as token and returns the JSON-RPC answer
// and the session's id.
func initAs(t *testing.T, url, token string) (string, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/mcp", strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data), resp.Header.Get("Mcp-Session-Id")
}

// TestClientSessionsAreCapped: bare initialize requests open client
// sessions up to mcp.max_client_sessions_per_token for one token and
// mcp.max_client_sessions in all; one more is refused before a downstream
// is started (before, each started one, 64 processes from one token in
// 6 s). A closed session frees its place.
func TestClientSessionsAreCapped(t *testing.T) {
	tokens := testTokens(t)
	lim := DefaultConfig()
	lim.MaxClientSessions, lim.MaxClientSessionsPerToken = 3, 2
	h := newHarness(t, Options{Limits: lim}, tokens)
	var dials atomic.Int32
	dial := h.gw.opts.Dial
	h.gw.opts.Dial = func() (mcp.Transport, error) { dials.Add(1); return dial() }
	srv := httptest.NewServer(h.gw.HTTPHandler(HTTPOptions{Tokens: tokens}))
	defer srv.Close()

	var idsA []string
	for i := range 3 {
		body, id := initAs(t, srv.URL, tokenA)
		if i < 2 {
			if !strings.Contains(body, `"protocolVersion"`) {
				t.Fatalf("A's session %d: %s", i+1, body)
			}
			idsA = append(idsA, id)
		} else if !strings.Contains(body, "too many client sessions for this token: 2 are open (mcp.max_client_sessions_per_token)") {
			t.Fatalf("A's third session: %s", body)
		}
	}
	if body, _ := initAs(t, srv.URL, tokenB); !strings.Contains(body, `"protocolVersion"`) {
		t.Fatalf("B's session: %s", body)
	}
	body, refusedID := initAs(t, srv.URL, tokenB)
	if !strings.Contains(body, "too many client sessions: 3 are open (mcp.max_client_sessions)") {
		t.Fatalf("B's second session: %s", body)
	}
	// The refused session is closed once answered: it holds nothing.
	guardtest.WaitFor(t, "the refused session to be closed", func() bool {
		req, _ := http.NewRequest("POST", srv.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tokenB)
		req.Header.Set("Mcp-Session-Id", refusedID)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNotFound
	})
	if n := dials.Load(); n != 3 || h.gw.Sessions() != 3 {
		t.Fatalf("%d downstreams started, %d sessions, want 3", n, h.gw.Sessions())
	}
	req, _ := http.NewRequest("DELETE", srv.URL+"/mcp", nil)
	req.Header.Set("Authorization", "Bearer "+tokenA)
	req.Header.Set("Mcp-Session-Id", idsA[0])
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode >= 300 {
		t.Fatalf("DELETE: %v %v", err, resp)
	}
	guardtest.WaitFor(t, "the closed session's place", func() bool { return h.gw.Sessions() == 2 })
	if body, _ := initAs(t, srv.URL, tokenA); !strings.Contains(body, `"protocolVersion"`) {
		t.Fatalf("A's session after one closed: %s", body)
	}
}

// TestPendingRequestsAreBounded: a downstream that sends the client
// sampling requests the client does not answer gets an error at once for
// each past mcp.max_pending_requests, and for one whose params exceed
// mcp.max_pending_request_bytes; nothing more is held.
func TestPendingRequestsAreBounded(t *testing.T) {
	lim := DefaultConfig()
	lim.MaxPendingRequests, lim.MaxPendingRequestBytes = 2, 2000
	h := newHarness(t, Options{Limits: lim, Task: "t"})
	release := make(chan struct{})
	h.onSample = func() { <-release }
	mcp.AddTool(h.down.server, &mcp.Tool{Name: "flood"}, func(ctx context.Context, r *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		sample := func(text string) error {
			_, err := r.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 1, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: text}}}})
			return err
		}
		if err := sample(strings.Repeat("x", 3000)); err == nil || !strings.Contains(err.Error(), "mcp.max_pending_request_bytes (2000)") {
			return nil, nil, fmt.Errorf("a 3 KB request: %v", err)
		}
		var wg sync.WaitGroup
		var refused atomic.Int32
		errs := make(chan error, 5)
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := sample("hi")
				if err != nil && strings.Contains(err.Error(), "mcp.max_pending_requests") {
					if refused.Add(1) == 3 {
						close(release) // the client answers the two it holds
					}
					return
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		answered := 0
		for err := range errs {
			if err != nil {
				return nil, nil, err
			}
			answered++
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%d refused, %d answered", refused.Load(), answered)}}}, nil, nil
	})
	ctx := context.Background()
	c := h.connect(ctx)
	res, err := c.call(ctx, "flood", map[string]any{}, nil)
	if err != nil || res.IsError || text(res) != "3 refused, 2 answered" {
		t.Fatalf("%v %+v %q", err, res, text(res))
	}
}

// TestNotificationsPerCallAreCapped: a tool that sends 10 progress
// notifications during one call, past mcp.max_notifications_per_call = 2:
// the client gets 2 and the other 8 are dropped (also when they are
// handled after the call's response), and the call completes normally.
func TestNotificationsPerCallAreCapped(t *testing.T) {
	lim := DefaultConfig()
	lim.MaxNotificationsPerCall = 2
	h := newHarness(t, Options{Limits: lim, Task: "t"})
	mcp.AddTool(h.down.server, &mcp.Tool{Name: "chatty"}, func(ctx context.Context, r *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		for i := 1; i <= 10; i++ {
			if err := r.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: r.Params.GetProgressToken(), Progress: float64(i), Total: 10}); err != nil {
				return nil, nil, err
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	})
	ctx := context.Background()
	c := h.connect(ctx)
	params := &mcp.CallToolParams{Name: "chatty", Arguments: map[string]any{}}
	params.SetProgressToken("p")
	res, err := c.cs.CallTool(ctx, params)
	if err != nil || res.IsError || text(res) != "done" {
		t.Fatalf("%v %+v", err, res)
	}
	for want := 1.0; want <= 2; want++ {
		if got := receive(t, c.progress, "a progress notification"); got != want {
			t.Errorf("progress %g, want %g", got, want)
		}
	}
	var s *session
	h.gw.mu.Lock()
	for _, v := range h.gw.sessions {
		s = v
	}
	h.gw.mu.Unlock()
	guardtest.WaitFor(t, "8 notifications dropped", func() bool { return s.dropped.Load() == 8 })
	if len(c.progress) != 0 {
		t.Errorf("the client got %d more notifications", len(c.progress))
	}
	// Those handled before the call's response count in its outcome (the
	// SDK may answer the call before it handles what came before it).
	recs := events(h.records(), EventOutcome)
	if len(recs) != 1 || recs[0].DroppedNotifications > 8 {
		t.Fatalf("outcome %+v", recs)
	}
}

// TestUpstreamBodiesAreBounded: a plain JSON response longer than the
// bound fails its read; a server-sent event stream may be longer than the
// bound as long as each event is within it, and fails at an event that is
// not.
func TestUpstreamBodiesAreBounded(t *testing.T) {
	event := "data: " + strings.Repeat("e", 80) + "\n\n"
	cases := []struct {
		name, ctype, body, wantErr string
	}{
		{"json within", "application/json", strings.Repeat("j", 100), ""},
		{"json beyond", "application/json", strings.Repeat("j", 101), "a response body from the downstream MCP server"},
		{"events within", "text/event-stream", strings.Repeat(event, 50), ""},
		{"events, CRLF", "text/event-stream", strings.Repeat(strings.ReplaceAll(event, "\n", "\r\n"), 50), ""},
		{"an event beyond", "text/event-stream", event + "data: " + strings.Repeat("e", 100) + "\n\n", "a server-sent event from the downstream MCP server"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", c.ctype)
				io.WriteString(w, c.body)
			}))
			defer srv.Close()
			resp, err := UpstreamClient(100).Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if c.wantErr == "" {
				if err != nil || string(data) != c.body {
					t.Errorf("%v, %d of %d bytes", err, len(data), len(c.body))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), "longer than 100 bytes (serve.max_body_bytes)") {
				t.Errorf("err %v", err)
			}
		})
	}
}

// rawDownstream is a downstream written by hand over pipes: it sends
// notifications/tools/list_changed during the handshake — before it
// answers initialize, and again at the client's initialized (as
// server-everything does) — then lists one tool.
func rawDownstream(t *testing.T) (mcp.Transport, error) {
	upR, upW := io.Pipe()     // gateway to server
	downR, downW := io.Pipe() // server to gateway
	go func() {
		defer downW.Close()
		lines := bufio.NewScanner(upR)
		lines.Buffer(nil, 1<<20)
		for lines.Scan() {
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					ProtocolVersion string `json:"protocolVersion"`
				} `json:"params"`
			}
			if json.Unmarshal(lines.Bytes(), &msg) != nil {
				continue
			}
			if msg.Method == "notifications/initialized" { // as server-everything registers its tools
				io.WriteString(downW, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`+"\n")
			}
			if msg.ID == nil {
				continue
			}
			var out string
			switch msg.Method {
			case "initialize":
				io.WriteString(downW, `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`+"\n")
				out = fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%q,"capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"raw","version":"1"}}}`, msg.ID, msg.Params.ProtocolVersion)
			case "tools/list":
				out = fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}}`, msg.ID)
			default:
				out = fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, msg.ID)
			}
			io.WriteString(downW, out+"\n")
		}
	}()
	return &mcp.IOTransport{Reader: downR, Writer: upW}, nil
}

// TestListChangedDuringTheHandshake: a downstream that says its tool
// list changed before it has answered initialize does not bring the
// gateway down (the check then waits for the handshake; before, it listed
// on a connection not yet made: a nil pointer, the process gone).
func TestListChangedDuringTheHandshake(t *testing.T) {
	pins, err := OpenPins(t.TempDir(), "raw", "")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Options{Pins: pins})
	h.gw.opts.Dial = func() (mcp.Transport, error) { return rawDownstream(t) }
	ctx := context.Background()
	c := h.connect(ctx)
	res, err := c.cs.ListTools(ctx, nil)
	if err != nil || len(res.Tools) != 1 || res.Tools[0].Name != "t" {
		t.Fatalf("%v %+v", err, res)
	}
}
