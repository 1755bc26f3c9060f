package mcpgate

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/serve"
)

// paddedInit is an initialize request of about n bytes (its _meta padded).
func paddedInit(n int) string {
	pad := max(n-len(initBody), 0)
	return strings.Replace(initBody, `"params":{`, `"params":{"_meta":{"pad":"`+strings.Repeat("x", pad)+`"},`, 1)
}

// TestMCPMessagesFallUnderMaxBodyBytes: a client's message larger than
// serve.max_body_bytes is refused whole: over HTTP /mcp answers 413 (the
// SDK's own default was 4 MiB), over stdio the session ends with an error
// (the SDK's default was 16 MiB a line). Smaller ones are served.
func TestMCPMessagesFallUnderMaxBodyBytes(t *testing.T) {
	cfg := serve.DefaultConfig()
	cfg.MaxBodyBytes = 64 << 10
	h := newHarnessConfig(t, Options{}, cfg)
	srv := httptest.NewServer(h.gw.HTTPHandler(HTTPOptions{}))
	defer srv.Close()
	if code, body := rawRequest(t, "POST", srv.URL+"/mcp", paddedInit(100<<10), nil); code != 413 {
		t.Errorf("a 100 KB message over HTTP: %d %s", code, body)
	}
	if code, body := rawRequest(t, "POST", srv.URL+"/mcp", paddedInit(32<<10), nil); code != 200 {
		t.Errorf("a 32 KB message over HTTP: %d %s", code, body)
	}

	// Over stdio: a message within the bound is answered, a longer one
	// ends the session.
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { done <- h.gw.ServeStdio(ctx, inR, outW) }()
	lines := bufio.NewReader(outR)
	go io.WriteString(inW, paddedInit(32<<10)+"\n")
	if line, err := lines.ReadString('\n'); err != nil || !strings.Contains(line, `"protocolVersion"`) {
		t.Fatalf("a 32 KB message over stdio: %v %.200s", err, line)
	}
	go io.Copy(io.Discard, lines)
	go io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized","params":{"_meta":{"pad":"`+strings.Repeat("x", 100<<10)+`"}}}`+"\n")
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "maximum line length") {
			t.Errorf("the stdio session ended with %v", err)
		}
	case <-ctx.Done():
		t.Fatal("a 100 KB message over stdio did not end the session")
	}
}

// TestALongToolResultIsCutBeforeTheGuard: a tool result longer than
// serve.max_body_bytes becomes the next observation cut to its head and
// tail around a marker, within the bound, before the guard and the store
// see it (before, the whole result was stored as the step's observation);
// a result within the bound is kept whole.
func TestALongToolResultIsCutBeforeTheGuard(t *testing.T) {
	cfg := serve.DefaultConfig()
	cfg.MaxBodyBytes = 64 << 10
	h := newHarnessConfig(t, Options{Task: "Summarise big.txt"}, cfg)
	big := "BIG-START " + strings.Repeat("lorem ipsum ", 30_000) + " BIG-END"
	h.down.files["big.txt"] = big
	ctx := context.Background()
	c := h.connect(ctx)
	for _, path := range []string{"big.txt", "notes.txt", "notes.txt"} {
		res, err := c.call(ctx, "read_file", map[string]any{"path": path}, nil)
		if err != nil || res.IsError {
			t.Fatalf("read_file %s: %v %+v", path, err, res)
		}
		if path == "big.txt" && text(res) != big {
			t.Fatalf("the client got %d bytes of the %d-byte result", len(text(res)), len(big))
		}
	}
	recs := h.records()
	_, steps, err := h.store.GetWithSteps(recs[0].Session)
	if err != nil || len(steps) != 3 {
		t.Fatalf("%d steps, %v", len(steps), err)
	}
	obs := *steps[1].Observation
	if len(obs) > int(cfg.MaxBodyBytes) || !strings.HasPrefix(obs, "BIG-START lorem") || !strings.HasSuffix(obs, "ipsum  BIG-END") ||
		!strings.Contains(obs, " bytes elided ...]") {
		t.Errorf("the observation of the long result: %d bytes, %.80q … %.80q", len(obs), obs, obs[max(len(obs)-80, 0):])
	}
	if *steps[2].Observation != h.down.files["notes.txt"] {
		t.Errorf("a short result observed as %q", *steps[2].Observation)
	}
	// The step's stored result is the same cut text, marker included.
	if r := steps[0].Result; r == nil || *r != obs {
		t.Errorf("the long call's stored result is not its cut observation")
	}
}

// TestAListingIsBounded: a downstream that lists page after page (one
// tool a page), more tools than mcp.max_list_tools, or more bytes of
// tools than mcp.max_list_bytes, makes the listing
// fail with an error naming the downstream, for the client's tools/list
// and for a call's tool check alike; within the bounds it is whole.
func TestAListingIsBounded(t *testing.T) {
	cases := []struct {
		name       string
		tools      int
		pages, max int
		bytes      int64
		wantErr    string
		wantListed int
	}{
		{"within", 5, 5, 5, 8 << 20, "", 5},
		{"pages", 6, 5, 100, 8 << 20, "listed more than 5 pages of tools (mcp.max_list_pages)", 0},
		{"tools", 6, 100, 5, 8 << 20, "listed more than 5 tools (mcp.max_list_tools)", 0},
		// Each tool's JSON is {"inputSchema":{"additionalProperties":false,"type":"object"},"name":"tN"}:
		// 74 bytes, 222 for three.
		{"bytes within", 3, 100, 100, 222, "", 3},
		{"bytes", 3, 100, 100, 221, "listed more than 221 bytes of tools (mcp.max_list_bytes)", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			lim := DefaultConfig()
			lim.MaxListPages, lim.MaxListTools, lim.MaxListBytes = c.pages, c.max, c.bytes
			h := newHarness(t, Options{Limits: lim, Downstream: "paged-server"})
			h.down.server = mcp.NewServer(&mcp.Implementation{Name: "paged"}, &mcp.ServerOptions{PageSize: 1})
			for i := range c.tools {
				mcp.AddTool(h.down.server, &mcp.Tool{Name: fmt.Sprintf("t%d", i)}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
				})
			}
			cl := h.connect(ctx)
			res, err := cl.cs.ListTools(ctx, nil)
			if c.wantErr == "" {
				if err != nil || len(res.Tools) != c.wantListed || res.NextCursor != "" {
					t.Fatalf("%v %+v", err, res)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), `the downstream MCP server "paged-server" `+c.wantErr) {
				t.Errorf("tools/list: %v", err)
			}
			if _, err := cl.call(ctx, "t0", map[string]any{}, nil); err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("tools/call: %v", err)
			}
		})
	}
}
