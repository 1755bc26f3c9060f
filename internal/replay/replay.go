// Package replay plays recorded trajectories as the guard's own traffic —
// through serve's HTTP API, and through the MCP gateway in front of an MCP
// server that answers each call with its recorded observation — posts the
// true labels as an operator's, and checks that `data import sessions`
// gives the trajectories back. The in-process round trip test of
// cmd/mageguard and the end-to-end program scripts/replay-e2e share it,
// so that both check the same thing. Only they import it.
package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/servetest"
	"github.com/mageguard/mageguard/mcpgate"
	"github.com/mageguard/mageguard/serve"
)

// TB is the part of testing.TB the replay uses; a *testing.T and a
// scripts/internal/check T both have it.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Fatal(args ...any)
}

// Tokens of the replay: the agent's and the operator's.
const (
	AgentToken    = "agent-token-for-the-replay"
	OperatorToken = "operator-token-for-the-replay"
)

// Tokens authenticates the agent "agent" and the operator "op"; it
// returns them parsed and as the text of a --tokens-file.
func Tokens(t TB) (*serve.Tokens, string) {
	t.Helper()
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	text := fmt.Sprintf("tokens:\n  - {name: agent, role: agent, sha256: %s}\n  - {name: op, role: operator, sha256: %s}\n",
		sum(AgentToken), sum(OperatorToken))
	tokens, err := serve.ParseTokens([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return tokens, text
}

// Trajectories are the first n trajectories of the file (the synth eval
// split) that have actions, with a user message added before turn 2 of
// the first, so that user messages make the round trip too.
func Trajectories(t TB, path string, n int) []*dataset.Trajectory {
	t.Helper()
	all, err := dataset.ReadAll(path)
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
		t.Fatalf("%s has %d trajectories with actions, want %d (the first with 3 actions or more)", path, len(out), n)
	}
	msg := "Also tell me when you are done."
	out[0].Turns[2].User = &msg
	return out
}

// RecordedTools is an MCP server that answers each call with the next
// recorded observation, after checking that the call is the recorded one
// (tool name, arguments byte for byte).
type RecordedTools struct {
	Server *mcp.Server // serve it to the gateway

	t     TB
	mu    sync.Mutex
	queue []dataset.Turn
}

// NewRecordedTools has a tool for every action name of trs.
func NewRecordedTools(t TB, trs []*dataset.Trajectory) *RecordedTools {
	r := &RecordedTools{t: t, Server: mcp.NewServer(&mcp.Implementation{Name: "recorded", Version: "1"}, nil)}
	seen := map[string]bool{}
	for _, tr := range trs {
		for _, tu := range tr.Turns {
			if seen[tu.Action.Name] {
				continue
			}
			seen[tu.Action.Name] = true
			r.Server.AddTool(&mcp.Tool{Name: tu.Action.Name, InputSchema: json.RawMessage(`{"type":"object"}`)}, r.answer)
		}
	}
	return r
}

// expect queues the turn the next call must be.
func (r *RecordedTools) expect(tu dataset.Turn) {
	r.mu.Lock()
	r.queue = append(r.queue, tu)
	r.mu.Unlock()
}

func (r *RecordedTools) answer(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
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

// Serve plays each trajectory as an agent of serve's API (base): one
// session each, one assess a turn with the previous turn's observation,
// an operator's resume after a block, the last turn's result; then the
// operator labels every step with its true label. It returns the
// sessions' ids.
func Serve(t TB, base string, trs []*dataset.Trajectory) []string {
	t.Helper()
	agent := &servetest.Client{Base: base, Token: AgentToken}
	var ids []string
	for _, tr := range trs {
		var created struct{ ID string }
		if code := agent.Call(t, "POST", "/v1/sessions", map[string]any{"user_prompt": tr.UserPrompt}, &created); code != 201 {
			t.Fatalf("create: %d", code)
		}
		for i := range tr.Turns {
			body := servetest.AssessTurn(tr, i)
			body["step"] = i
			var ans serve.AssessResponse
			if code := agent.Call(t, "POST", "/v1/sessions/"+created.ID+"/assess", body, &ans); code != 200 {
				t.Fatalf("%s turn %d: assess %d", tr.ID, i, code)
			}
			if ans.Decision == serve.DecisionBlock {
				resumeSession(t, base, created.ID)
			}
		}
		last := len(tr.Turns) - 1
		path := fmt.Sprintf("/v1/sessions/%s/steps/%d/result", created.ID, last)
		if code := agent.Call(t, "POST", path, map[string]any{"observation": tr.Turns[last].Observation}, nil); code != 200 {
			t.Fatalf("%s: result %d", tr.ID, code)
		}
		ids = append(ids, created.ID)
	}
	labelSteps(t, base, trs, ids)
	return ids
}

// resumeSession resumes a blocked session as the operator.
func resumeSession(t TB, base, id string) {
	t.Helper()
	op := &servetest.Client{Base: base, Token: OperatorToken}
	if code := op.Call(t, "POST", "/v1/sessions/"+id+"/resume", nil, nil); code != 200 {
		t.Fatalf("resume %s: %d", id, code)
	}
}

// labelSteps posts every turn's true label as the operator's label of
// its step.
func labelSteps(t TB, base string, trs []*dataset.Trajectory, ids []string) {
	t.Helper()
	op := &servetest.Client{Base: base, Token: OperatorToken}
	for k, tr := range trs {
		for i, tu := range tr.Turns {
			path := fmt.Sprintf("/v1/sessions/%s/steps/%d/label", ids[k], i)
			if code := op.Call(t, "POST", path, map[string]any{"label": tu.Label, "note": "replayed " + tr.ID}, nil); code != 200 {
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

// Gateway plays each trajectory as an MCP client of the gateway at base
// (/mcp for MCP, /v1/ for the API): one client session each, the user's
// prompt in the first call's _meta and a user message in its turn's; the
// downstream answers with the recorded observations. Then the operator
// labels every step. It returns the guard sessions' ids, read from the
// audit log.
func Gateway(t TB, base, audit string, down *RecordedTools, trs []*dataset.Trajectory) []string {
	t.Helper()
	ctx := context.Background()
	hc := &http.Client{Transport: bearer{AgentToken, http.DefaultTransport}}
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

// CheckImported reads an imported file and checks it against the
// replayed trajectories: one a session, id SOURCE:SESSION_ID, the same
// prompt, and every action, argument (byte for byte), observation, user
// message and label, each label an operator's; an attack when a label is
// 1.
func CheckImported(t TB, path, source string, trs []*dataset.Trajectory, ids []string) {
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
