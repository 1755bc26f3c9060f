package main

// The loop from the guard's own traffic back to training data: the
// trajectories of a synth file are played as an agent would play them —
// through serve's HTTP API, and through the MCP gateway in --monitor in
// front of an MCP server that answers each call with its recorded
// observation — the true labels are posted as an operator's, and `data
// import sessions` must give the trajectories back, every action,
// argument, observation, user message and label (package
// internal/replay; scripts/replay-e2e plays the same with the binary).

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/internal/replay"
	"github.com/mageguard/mageguard/mcpgate"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/serve"
	"github.com/mageguard/mageguard/serve/store"
)

// replayGuard is a serve.Server over a new Bolt store in dir, with the
// tokens, whose scripted guard grows its memory and blocks every call of
// the tool reject (and allows the rest).
func replayGuard(t *testing.T, dir string, tokens *serve.Tokens, reject string) (*serve.Server, *store.Bolt) {
	t.Helper()
	st, err := store.Open(dir, store.Options{LockWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tok := guardtest.Tokenizer(t)
	model := &guardtest.Scripted{Tok: tok, Reply: func(_ generate.Request, p string) (string, error) {
		switch {
		case strings.Contains(p, "Update the memory"):
			return guardtest.MemoryCall(guardtest.GrowMemory(p, "m")), nil
		case strings.Contains(p, `"name": "`+reject+`"`):
			return guardtest.JudgeCall("reject", "not what the user asked"), nil
		}
		return guardtest.JudgeCall("approve", "fine"), nil
	}}
	srv, err := serve.New(serve.Options{Config: serve.DefaultConfig(), Rollout: rollout.DefaultConfig(), Store: st, Tokens: tokens})
	if err != nil {
		t.Fatal(err)
	}
	g, err := rollout.NewGuard(rollout.DefaultConfig(), tok, model)
	if err != nil {
		t.Fatal(err)
	}
	srv.SetGuard(g)
	return srv, st
}

// TestOwnTrafficRoundTrip: synth trajectories played through serve's API
// and through the gateway in --monitor, labeled by the operator with
// their true labels, come back from `data import sessions` as they were
// (every action, argument, observation, user message and label), and
// `data validate` accepts both files. The guard is scripted (it blocks
// one tool: serve's sessions are resumed, the gateway forwards anyway);
// the import reads the state read-only, refused while a server holds it.
func TestOwnTrafficRoundTrip(t *testing.T) {
	trs := replay.Trajectories(t, "../../data/synth/eval.jsonl", 6)
	tokens, _ := replay.Tokens(t)
	reject := trs[0].Turns[1].Action.Name
	out := t.TempDir()

	t.Run("serve", func(t *testing.T) {
		dir := t.TempDir()
		srv, st := replayGuard(t, dir, tokens, reject)
		hs := httptest.NewServer(srv.Handler())
		ids := replay.Serve(t, hs.URL, trs)
		file := filepath.Join(out, "serve.jsonl")
		if _, _, err := run(t, "data", "import", "sessions", "--state", dir, "--out", file); err == nil || !strings.Contains(err.Error(), "locked by another process") ||
			!strings.Contains(err.Error(), "stop it first") {
			t.Errorf("an import beside the running server: %v", err)
		}
		hs.Close()
		srv.Close()
		st.Close()
		_, errs, err := run(t, "data", "import", "sessions", "--state", dir, "--out", file)
		if err != nil {
			t.Fatal(err)
		}
		actions := 0
		for _, tr := range trs {
			actions += len(tr.Turns)
		}
		if want := fmt.Sprintf("%d trajectories of %d sessions (0 skipped: unlabeled actions), %d actions (%d labeled by an operator", len(trs), len(trs), actions, actions); !strings.Contains(errs, want) ||
			!strings.Contains(errs, ", 0 without a recorded result") {
			t.Errorf("summary %q, want %q", errs, want)
		}
		replay.CheckImported(t, file, "serve", trs, ids)
		if o, _, err := run(t, "data", "validate", file); err != nil || !strings.Contains(o, fmt.Sprintf("ok: %d trajectories", len(trs))) {
			t.Errorf("validate: %v %q", err, o)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		dir := t.TempDir()
		srv, st := replayGuard(t, dir, tokens, reject)
		down := replay.NewRecordedTools(t, trs)
		ds := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return down.Server }, nil))
		defer ds.Close()
		audit, err := mcpgate.OpenAudit(filepath.Join(dir, "audit.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		gw, err := mcpgate.New(mcpgate.Options{Guard: srv, Monitor: true, Audit: audit,
			Dial: func() (mcp.Transport, error) {
				return &mcp.StreamableClientTransport{Endpoint: ds.URL, MaxRetries: -1}, nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(gw.HTTPHandler(mcpgate.HTTPOptions{Tokens: tokens, API: srv.Handler()}))
		ids := replay.Gateway(t, hs.URL, audit.Path(), down, trs)
		hs.Close()
		gw.Close()
		srv.Close()
		audit.Close()
		st.Close()
		file := filepath.Join(out, "mcp.jsonl")
		if _, _, err := run(t, "data", "import", "sessions", "--state", dir, "--out", file); err != nil { // mcp: the state holds audit.jsonl
			t.Fatal(err)
		}
		replay.CheckImported(t, file, "mcp", trs, ids)
		if o, _, err := run(t, "data", "validate", file); err != nil || !strings.Contains(o, fmt.Sprintf("ok: %d trajectories", len(trs))) {
			t.Errorf("validate: %v %q", err, o)
		}
	})
}
