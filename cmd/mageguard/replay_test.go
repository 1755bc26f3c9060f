package main

// The loop from the guard's own traffic back to training data: the
// trajectories of a synth file are played as an agent would play them —
// through serve's HTTP API, and through the MCP gateway in --monitor in
// front of an MCP server that answers each call with its recorded
// observation — the true labels are posted as an operator's, and `data
// import sessions` must give the trajectories back, every action,
// argument, observation, user message and label.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/mcpgate"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/serve"
	"github.com/mageguard/mageguard/serve/store"
)

// Tokens of the replay: the agent's and the operator's.
const (
	replayAgentToken    = "agent-token-for-the-replay"
	replayOperatorToken = "operator-token-for-the-replay"
)

// replayTokens authenticates the agent "agent" and the operator "op".
func replayTokens(t testing.TB) (*serve.Tokens, string) {
	t.Helper()
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	text := fmt.Sprintf("tokens:\n  - {name: agent, role: agent, sha256: %s}\n  - {name: op, role: operator, sha256: %s}\n",
		sum(replayAgentToken), sum(replayOperatorToken))
	tokens, err := serve.ParseTokens([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return tokens, text
}

// replayTrajectories are the first n trajectories of the synth eval file
// that have actions, with a user message added before turn 2 of the
// first, so that user messages make the round trip too.
func replayTrajectories(t testing.TB, n int) []*dataset.Trajectory {
	t.Helper()
	all, err := dataset.ReadAll("../../data/synth/eval.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var out []*dataset.Trajectory
	for _, tr := range all {
		if len(tr.Turns) > 0 && len(out) < n {
			out = append(out, tr)
		}
	}
	if len(out) < n || len(out[0].Turns) < 3 {
		t.Fatalf("the synth file has %d trajectories with actions", len(out))
	}
	msg := "Also tell me when you are done."
	out[0].Turns[2].User = &msg
	return out
}

// recordedTools is an MCP server that answers each call with the next
// recorded observation, after checking that the call is the recorded one
// (tool name, arguments byte for byte).
type recordedTools struct {
	t      testing.TB
	server *mcp.Server
	mu     sync.Mutex
	queue  []dataset.Turn
}

func newRecordedTools(t testing.TB, trs []*dataset.Trajectory) *recordedTools {
	r := &recordedTools{t: t, server: mcp.NewServer(&mcp.Implementation{Name: "recorded", Version: "1"}, nil)}
	seen := map[string]bool{}
	for _, tr := range trs {
		for _, tu := range tr.Turns {
			if seen[tu.Action.Name] {
				continue
			}
			seen[tu.Action.Name] = true
			r.server.AddTool(&mcp.Tool{Name: tu.Action.Name, InputSchema: json.RawMessage(`{"type":"object"}`)}, r.answer)
		}
	}
	return r
}

// expect queues the turn the next call must be.
func (r *recordedTools) expect(tu dataset.Turn) {
	r.mu.Lock()
	r.queue = append(r.queue, tu)
	r.mu.Unlock()
}

func (r *recordedTools) answer(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 {
		return nil, fmt.Errorf("unexpected call to %s", req.Params.Name)
	}
	tu := r.queue[0]
	r.queue = r.queue[1:]
	if args := string(req.Params.Arguments); req.Params.Name != tu.Action.Name || args != string(tu.Action.Arguments) {
		r.t.Errorf("the downstream got %s %s, want %s %s", req.Params.Name, args, tu.Action.Name, tu.Action.Arguments)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: tu.Observation}}}, nil
}

// replayServe plays each trajectory as an agent of serve's API (base):
// one session each, one assess a turn with the previous turn's
// observation, an operator's resume after a block, the last turn's
// result; then the operator labels every step with its true label. It
// returns the sessions' ids.
func replayServe(t testing.TB, base string, trs []*dataset.Trajectory) []string {
	t.Helper()
	agent := &client{t: t, base: base, token: replayAgentToken}
	var ids []string
	for _, tr := range trs {
		var created struct{ ID string }
		if code := agent.call("POST", "/v1/sessions", map[string]any{"user_prompt": tr.UserPrompt}, &created); code != 201 {
			t.Fatalf("create: %d", code)
		}
		for i := range tr.Turns {
			body := assessTurn(tr, i)
			body["step"] = i
			var ans serve.AssessResponse
			if code := agent.call("POST", "/v1/sessions/"+created.ID+"/assess", body, &ans); code != 200 {
				t.Fatalf("%s turn %d: assess %d", tr.ID, i, code)
			}
			if ans.Decision == serve.DecisionBlock {
				resumeSession(t, base, created.ID)
			}
		}
		last := len(tr.Turns) - 1
		path := fmt.Sprintf("/v1/sessions/%s/steps/%d/result", created.ID, last)
		if code := agent.call("POST", path, map[string]any{"observation": tr.Turns[last].Observation}, nil); code != 200 {
			t.Fatalf("%s: result %d", tr.ID, code)
		}
		ids = append(ids, created.ID)
	}
	labelSteps(t, base, trs, ids)
	return ids
}

// resumeSession resumes a blocked session as the operator.
func resumeSession(t testing.TB, base, id string) {
	t.Helper()
	op := &client{t: t, base: base, token: replayOperatorToken}
	if code := op.call("POST", "/v1/sessions/"+id+"/resume", nil, nil); code != 200 {
		t.Fatalf("resume %s: %d", id, code)
	}
}

// labelSteps posts every turn's true label as the operator's label of
// its step.
func labelSteps(t testing.TB, base string, trs []*dataset.Trajectory, ids []string) {
	t.Helper()
	op := &client{t: t, base: base, token: replayOperatorToken}
	for k, tr := range trs {
		for i, tu := range tr.Turns {
			path := fmt.Sprintf("/v1/sessions/%s/steps/%d/label", ids[k], i)
			if code := op.call("POST", path, map[string]any{"label": tu.Label, "note": "replayed " + tr.ID}, nil); code != 200 {
				t.Fatalf("label %s step %d: %d", ids[k], i, code)
			}
		}
	}
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// replayGateway plays each trajectory as an MCP client of the gateway at
// base (/mcp for MCP, /v1/ for the API): one client session each, the
// user's prompt in the first call's _meta and a user message in its
// turn's; the downstream answers with the recorded observations. Then the
// operator labels every step. It returns the guard sessions' ids, read
// from the audit log.
func replayGateway(t testing.TB, base, audit string, down *recordedTools, trs []*dataset.Trajectory) []string {
	t.Helper()
	ctx := context.Background()
	hc := &http.Client{Transport: bearer{replayAgentToken, http.DefaultTransport}}
	for _, tr := range trs {
		cl := mcp.NewClient(&mcp.Implementation{Name: "replay", Version: "1"}, nil)
		cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, tu := range tr.Turns {
			meta := mcp.Meta{}
			if i == 0 {
				meta[mcpgate.MetaUserPrompt] = tr.UserPrompt
			}
			if tu.User != nil {
				meta[mcpgate.MetaUserPrompt] = *tu.User
			}
			down.expect(tu)
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tu.Action.Name, Arguments: tu.Action.Arguments, Meta: meta})
			if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != tu.Observation {
				t.Fatalf("%s turn %d through the gateway: %v %+v", tr.ID, i, err, res)
			}
		}
		cs.Close()
	}
	recs, err := mcpgate.ReadAudit(audit)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range recs {
		if r.Event == mcpgate.EventDecision && (len(ids) == 0 || ids[len(ids)-1] != r.Session) {
			ids = append(ids, r.Session)
		}
	}
	if len(ids) != len(trs) {
		t.Fatalf("the audit log names %d guard sessions, want %d", len(ids), len(trs))
	}
	labelSteps(t, base, trs, ids)
	return ids
}

// checkImported reads an imported file and checks it against the
// replayed trajectories: one a session, id SOURCE:SESSION_ID, the same
// prompt, and every action, argument (byte for byte), observation, user
// message and label, each label an operator's; an attack when a label is
// 1.
func checkImported(t testing.TB, path, source string, trs []*dataset.Trajectory, ids []string) {
	t.Helper()
	got, err := dataset.ReadAll(path)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*dataset.Trajectory{}
	for _, g := range got {
		byID[g.ID] = g
	}
	if len(got) != len(trs) || len(byID) != len(trs) {
		t.Fatalf("%s: %d trajectories, want %d", path, len(got), len(trs))
	}
	for k, want := range trs {
		g := byID[source+":"+ids[k]]
		if g == nil {
			t.Fatalf("%s: no trajectory %s:%s", path, source, ids[k])
		}
		if g.UserPrompt != want.UserPrompt || g.Source != source || len(g.Turns) != len(want.Turns) ||
			(g.InjectionTaskID != nil) != (want.Positives() > 0) {
			t.Errorf("%s (%s): prompt %q, source %s, %d turns, injection task %v; want %q, %d turns, %d positives",
				g.ID, want.ID, g.UserPrompt, g.Source, len(g.Turns), g.InjectionTaskID, want.UserPrompt, len(want.Turns), want.Positives())
			continue
		}
		for i, w := range want.Turns {
			gt := g.Turns[i]
			if gt.Action.Name != w.Action.Name || string(gt.Action.Arguments) != string(w.Action.Arguments) ||
				gt.Observation != w.Observation || gt.Label != w.Label || gt.LabelSource != dataset.LabelHuman ||
				gt.LabelNote != "replayed "+want.ID || (gt.User == nil) != (w.User == nil) || (w.User != nil && *gt.User != *w.User) {
				t.Errorf("%s turn %d: %s %s %q label %d (%s) user %v; want %s %s %q label %d user %v", g.ID, i,
					gt.Action.Name, gt.Action.Arguments, gt.Observation, gt.Label, gt.LabelSource, gt.User,
					w.Action.Name, w.Action.Arguments, w.Observation, w.Label, w.User)
			}
		}
	}
}

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
	trs := replayTrajectories(t, 6)
	tokens, _ := replayTokens(t)
	reject := trs[0].Turns[1].Action.Name
	out := t.TempDir()

	t.Run("serve", func(t *testing.T) {
		dir := t.TempDir()
		srv, st := replayGuard(t, dir, tokens, reject)
		hs := httptest.NewServer(srv.Handler())
		ids := replayServe(t, hs.URL, trs)
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
		checkImported(t, file, "serve", trs, ids)
		if o, _, err := run(t, "data", "validate", file); err != nil || !strings.Contains(o, fmt.Sprintf("ok: %d trajectories", len(trs))) {
			t.Errorf("validate: %v %q", err, o)
		}
	})

	t.Run("mcp", func(t *testing.T) {
		dir := t.TempDir()
		srv, st := replayGuard(t, dir, tokens, reject)
		down := newRecordedTools(t, trs)
		ds := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return down.server }, nil))
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
		ids := replayGateway(t, hs.URL, audit.Path(), down, trs)
		hs.Close()
		gw.Close()
		srv.Close()
		audit.Close()
		st.Close()
		file := filepath.Join(out, "mcp.jsonl")
		if _, _, err := run(t, "data", "import", "sessions", "--state", dir, "--out", file); err != nil { // mcp: the state holds audit.jsonl
			t.Fatal(err)
		}
		checkImported(t, file, "mcp", trs, ids)
		if o, _, err := run(t, "data", "validate", file); err != nil || !strings.Contains(o, fmt.Sprintf("ok: %d trajectories", len(trs))) {
			t.Errorf("validate: %v %q", err, o)
		}
	})
}

// TestReplayE2E is make replay-e2e (skipped unless
// $MAGEGUARD_REPLAY_E2E names an output folder and $MAGEGUARD_BIN the
// built binary): the round trip of TestOwnTrafficRoundTrip with the real
// binary — `mageguard serve` and `mageguard mcp --monitor --listen` on a
// random tiny checkpoint (configs/tiny.yaml), tenants' tokens, an MCP
// server answering from the recording — then `data import sessions`,
// `data validate`, two steps of `train` on the serve import and an `eval`
// of the mcp import. $MAGEGUARD_REPLAY_TRAJECTORIES (default 4) synth
// trajectories are played. Each phase's time is logged.
func TestReplayE2E(t *testing.T) {
	out, bin := os.Getenv("MAGEGUARD_REPLAY_E2E"), os.Getenv("MAGEGUARD_BIN")
	if out == "" || bin == "" {
		t.Skip("make replay-e2e: set MAGEGUARD_REPLAY_E2E (output folder) and MAGEGUARD_BIN (the binary)")
	}
	n := 4
	if s := os.Getenv("MAGEGUARD_REPLAY_TRAJECTORIES"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("MAGEGUARD_REPLAY_TRAJECTORIES=%q: want a count >= 1", s)
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	start := time.Now()
	phase := func(what string) {
		t.Logf("replay-e2e: %-50s %6.1fs", what, time.Since(start).Seconds())
		start = time.Now()
	}
	mg := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = "../.."
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("mageguard %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	tiny := filepath.Join(tmp, "tiny")
	mg("model", "init", "--config", "configs/tiny.yaml", "--out", tiny)
	_, tokensText := replayTokens(t)
	tokensFile := filepath.Join(tmp, "tokens.yaml")
	if err := os.WriteFile(tokensFile, []byte(tokensText), 0o600); err != nil {
		t.Fatal(err)
	}
	guard := []string{"--config", "configs/tiny.yaml", "--model", tiny, "--tokens-file", tokensFile}
	trs := replayTrajectories(t, n)
	phase("a tiny checkpoint (model init)")

	serveState := filepath.Join(tmp, "serve")
	base, stop := startBinary(t, bin, `serve: listening on (http://[^ ]+)`, "", append([]string{"serve", "--addr", "127.0.0.1:0", "--state", serveState}, guard...)...)
	phase("serve started")
	serveIDs := replayServe(t, base, trs)
	stop()
	phase(fmt.Sprintf("%d trajectories through serve", n))

	down := newRecordedTools(t, trs)
	ds := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return down.server }, nil))
	defer ds.Close()
	mcpState := filepath.Join(tmp, "mcp")
	base, stop = startBinary(t, bin, `mcp: listening on (http://[^ ]+)`, "mcp: ready",
		append([]string{"mcp", "--monitor", "--listen", "127.0.0.1:0", "--state", mcpState, "--upstream-url", ds.URL}, guard...)...)
	phase("mcp --monitor started")
	mcpIDs := replayGateway(t, base, filepath.Join(mcpState, "audit.jsonl"), down, trs)
	stop()
	phase(fmt.Sprintf("%d trajectories through mcp --monitor", n))

	files := map[string]string{"serve": filepath.Join(out, "serve.jsonl"), "mcp": filepath.Join(out, "mcp.jsonl")}
	for source, state := range map[string]string{"serve": serveState, "mcp": mcpState} {
		t.Log(strings.TrimSpace(mg("data", "import", "sessions", "--state", state, "--out", files[source])))
		t.Log(strings.TrimSpace(mg("data", "validate", files[source])))
	}
	checkImported(t, files["serve"], "serve", trs, serveIDs)
	checkImported(t, files["mcp"], "mcp", trs, mcpIDs)
	phase("import, validate and compare")

	mg("train", "--config", "configs/tiny.yaml", "--model", tiny, "--data", files["serve"], "--out", filepath.Join(out, "train"),
		"--set", "train.steps=2", "--set", "train.save_every=2", "--set", "train.eval_every=0", "--set", fmt.Sprintf("train.trajectories=%d", min(n, 4)))
	if _, err := os.Stat(filepath.Join(out, "train", "checkpoint-2")); err != nil {
		t.Errorf("train wrote no checkpoint-2: %v", err)
	}
	phase("train, 2 steps on the serve import")
	mg("eval", "--config", "configs/tiny.yaml", "--model", filepath.Join(out, "train", "checkpoint-2"), "--data", files["mcp"], "--out", filepath.Join(out, "eval"))
	if _, err := os.Stat(filepath.Join(out, "eval", "report.md")); err != nil {
		t.Errorf("eval wrote no report: %v", err)
	}
	phase("eval of the trained checkpoint on the mcp import")
}

// startBinary starts the binary with args and returns the URL its stderr
// announces (the first group of listening), once ready appears there too
// (when given) and its /healthz answers 200; stop interrupts it and waits
// for it to exit.
func startBinary(t *testing.T, bin, listening, ready string, args ...string) (string, func()) {
	t.Helper()
	var stderr syncBuffer
	cmd := exec.Command(bin, args...)
	cmd.Dir = "../.."
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(os.Interrupt)
		if err := <-done; err != nil {
			t.Errorf("%s: %v\n%s", args[0], err, stderr.String())
		}
	}
	t.Cleanup(stop)
	re := regexp.MustCompile(listening)
	var base string
	pollUntil(t, 120*time.Second, args[0]+" to listen", func() bool {
		select {
		case err := <-done:
			t.Fatalf("%s exited: %v\n%s", args[0], err, stderr.String())
		default:
		}
		if m := re.FindStringSubmatch(stderr.String()); m != nil && strings.Contains(stderr.String(), ready) {
			base = m[1]
			return true
		}
		return false
	})
	pollUntil(t, 120*time.Second, args[0]+"'s model to load", func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return base, stop
}
