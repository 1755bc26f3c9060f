package mcpgate

// A tools/call is one step of the guard loop: the memory reads the
// previous call's result as the observation, the judge reads the new
// memory and this call. Allowed, the call is forwarded and its result
// becomes the next step's observation; blocked, the downstream is not
// called and the client gets a tool result with isError and the reason.
// With Options.Monitor every call is forwarded.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/rollout/prompt"
	"github.com/mageguard/mageguard/serve"
)

// notRun is the observation of a blocked call: what happened to it.
const notRun = "(not run: the guard blocked this call)"

// notRunAudit is the observation of an allowed call that was not run
// because its decision record could not be written.
const notRunAudit = "(not run: the gateway's audit log could not be written)"

// monitorOperator resumes a session blocked in monitor mode: the operator
// who started the gateway with Options.Monitor, which forwards every call
// whatever the decision. (Resuming is an operator's act; the client's
// token, an agent's, could not.)
var monitorOperator = serve.Principal{Name: "monitor", Role: serve.RoleOperator}

// callTool runs one tools/call: the tool must be one the downstream lists
// and its arguments a JSON object (else the call is refused with a tool
// result with isError, as the SDKs report a tool's bad input); the guard's
// step decides; the decision is audited; then the call is forwarded, or
// answered as blocked. A session's calls run one at a time, each step
// reading the previous call's result.
func (s *session) callTool(ctx context.Context, req *mcp.CallToolRequest) (mcp.Result, error) {
	arrived := s.g.now()
	p := req.Params
	meta, err := metaPrompt(p.Meta)
	if err != nil {
		return nil, err
	}
	fwd := *p // forwarded without the gateway's _meta key
	if _, ok := p.Meta[MetaUserPrompt]; ok {
		fwd.Meta = maps.Clone(p.Meta)
		delete(fwd.Meta, MetaUserPrompt)
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.turn }()

	rec := &Record{Event: EventDecision, MCPSession: s.name, Owner: s.owner, Tool: p.Name, Monitor: s.g.opts.Monitor}
	tool, err := s.tool(ctx, p.Name)
	if err != nil {
		return nil, downstreamError(ctx, err)
	}
	if tool == nil { // the name is the client's alone: quoted short
		rec.Tool, rec.Error = serve.ShortText(p.Name), "unknown tool: the downstream server does not list it"
		return s.notForwarded(rec, refused("mageguard: unknown tool %q: the downstream MCP server does not list it; the call was not run", serve.ShortText(p.Name)))
	}
	if tool.auditErr != nil { // its change is not in the audit log: fails closed, as any record
		return auditFailed(tool.auditErr), nil
	}
	if tool.Status != ToolApproved {
		rec.Flag = flag(tool)
		if !s.g.opts.Monitor {
			rec.Error = rec.Flag + " (not approved)"
			return s.notForwarded(rec, refused("%s", unapproved(tool)))
		}
	}
	if change := s.approvedChanges(); change != "" && s.observation != nil {
		s.observation = ptr(s.g.bound(*s.observation + change))
	}
	areq, err := s.assessRequest(p.Name, p.Arguments, meta)
	if err != nil {
		rec.Error = err.Error()
		return s.notForwarded(rec, refused("mageguard: %s; the call was not run", err))
	}
	rec.Arguments = s.g.elide(areq.Action).Arguments
	stepped := s.g.now()
	ans, err := s.step(ctx, areq, meta)
	decided := s.g.now()
	rec.GuardMS, rec.StepUS = decided.Sub(arrived).Milliseconds(), decided.Sub(stepped).Microseconds()
	rec.Session = s.guardID
	if err != nil {
		return s.undecided(ctx, &fwd, rec, err)
	}
	step := ans.Step
	score := ans.Score
	rec.Step, rec.Decision, rec.Score, rec.Rationale = &step, ans.Decision, &score, ans.Rationale
	rec.MemoryVersion, rec.GuardTokens = ans.MemoryVersion, ans.Tokens
	rec.PrefillMS, rec.MemoryMS, rec.JudgeMS = millis(ans.Timing.Prefill), millis(ans.Timing.Memory), millis(ans.Timing.Judge)
	if ans.Decision == serve.DecisionBlock {
		if !s.g.opts.Monitor {
			s.observation = ptr(notRun)
			s.recordResult(step, notRun)
			return s.notForwarded(rec, blocked(p.Name, s.guardID, ans))
		}
		if err := s.g.opts.Guard.Resume(monitorOperator, s.guardID); err != nil {
			s.g.log.Error("monitor: resume", "session", s.guardID, "error", err.Error())
		}
	}
	return s.forwardCall(ctx, &fwd, rec, true)
}

// millis is d in milliseconds, to the microsecond (the audit's phases).
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// undecided handles a call the guard did not decide (err: the session is
// blocked, the guard is loading or overloaded, the deadline passed, the
// client went away): refused with the reason, or with Monitor forwarded
// without a step.
func (s *session) undecided(ctx context.Context, fwd *mcp.CallToolParamsRaw, rec *Record, err error) (mcp.Result, error) {
	rec.Error = err.Error()
	var ae *serve.APIError
	if errors.As(err, &ae) && ae.Status == 400 {
		return s.notForwarded(rec, refused("mageguard: %s; the call was not run", strings.TrimPrefix(ae.Message, "action.")))
	}
	if ctx.Err() != nil {
		if aerr := s.g.audit(rec); aerr != nil {
			s.g.log.Error("audit", "error", aerr.Error())
		}
		return nil, ctx.Err()
	}
	if s.g.opts.Monitor {
		return s.forwardCall(ctx, fwd, rec, false)
	}
	if ae != nil && ae.Code == "unknown_session" {
		return s.notForwarded(rec, refused("mageguard: this session's guard session %s no longer exists (deleted, or expired after serve.session_idle_s); "+
			"the call to %s was not run. Start a new session (reconnect).", s.guardID, fwd.Name))
	}
	if ae != nil && ae.Code == "session_blocked" {
		return s.notForwarded(rec, refused("mageguard: this session is blocked since the guard blocked one of its calls; the call to %s was not run. "+
			"An operator can resume the session (guard session %s: POST /v1/sessions/%s/resume).", fwd.Name, s.guardID, s.guardID))
	}
	return s.notForwarded(rec, refused("mageguard could not assess this call to %s (%s); the call was not run.", fwd.Name, rec.Error))
}

// notForwarded audits the decision not to forward a call and returns the
// client's result for it; a record that cannot be written fails closed
// like a forwarded call's: the client is told the audit failed (the call
// was not run either way).
func (s *session) notForwarded(rec *Record, res *mcp.CallToolResult) (mcp.Result, error) {
	if err := s.g.audit(rec); err != nil {
		s.g.log.Error("audit", "error", err.Error())
		return auditFailed(err), nil
	}
	return res, nil
}

// auditFailed is the client's result for a call whose record could not
// be written: not run, and why.
func auditFailed(err error) *mcp.CallToolResult {
	return refused("mageguard: the audit log could not be written (%v); the call was not run", err)
}

// refused is a tool result with isError: a call the gateway did not run,
// and why (as a tool's own errors are reported, so the agent's model
// reads it).
func refused(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// forwardCall audits the decision to forward (the call does not go out if
// that fails), forwards the call, audits its outcome and keeps its result
// for the next step's observation: a stepped call's result is that
// observation, and is stored as its step's result; the result of a call
// forwarded without a step (Monitor) is appended to the pending one with
// the call that produced it, so that the memory still reads it. Before the
// session's first stepped call there is no pending observation, and such a
// result is not kept: the memory reads an observation only beside the
// stepped action it follows, and the first step has none.
func (s *session) forwardCall(ctx context.Context, fwd *mcp.CallToolParamsRaw, rec *Record, stepped bool) (mcp.Result, error) {
	rec.Forwarded = true
	if err := s.g.audit(rec); err != nil {
		s.g.log.Error("audit", "error", err.Error())
		if stepped {
			s.observation = ptr(notRunAudit)
		}
		return auditFailed(err), nil
	}
	start := s.g.now()
	res, dropped, err := s.forwardCounted(ctx, "tools/call", fwd)
	took := s.g.now().Sub(start)
	out := &Record{Event: EventOutcome, MCPSession: s.name, Owner: s.owner, Session: rec.Session, Step: rec.Step, Tool: rec.Tool,
		Forwarded: true, Monitor: rec.Monitor, DownstreamMS: took.Milliseconds(), DownstreamUS: took.Microseconds(),
		DroppedNotifications: dropped}
	var result *mcp.CallToolResult
	if err != nil {
		out.Error = err.Error()
	} else if result, _ = res.(*mcp.CallToolResult); result != nil {
		out.IsError = &result.IsError
	}
	if aerr := s.g.audit(out); aerr != nil {
		s.g.log.Error("audit", "error", aerr.Error())
	}
	switch {
	case stepped:
		s.observation = ptr(s.g.bound(observationText(result, err)))
		s.recordResult(*rec.Step, *s.observation)
	case s.observation != nil:
		s.observation = ptr(s.g.bound(*s.observation + fmt.Sprintf(unassessed, rec.Tool, rec.Arguments) + observationText(result, err)))
	}
	return res, err
}

// recordResult stores what step n's call returned as its result in the
// guard session (the next step's observation repeats it; the last step
// has no next): data import sessions reads a step's result from here. A
// failure is logged: the call has run and its answer goes to the client.
func (s *session) recordResult(n int, text string) {
	if err := s.g.opts.Guard.RecordResult(s.guardID, n, text); err != nil {
		s.g.log.Error("record result", "session", s.guardID, "step", n, "error", err.Error())
	}
}

// unassessed introduces, in the pending observation, the result of a call
// forwarded without a step: the call's tool and arguments (as the guard
// shows them), then its result.
const unassessed = "\n\n[then a call the guard did not assess ran: %s %s; its result:]\n"

// bound cuts a tool result longer than serve.max_body_bytes to its head
// and tail around a marker (prompt.ElideBytes), before the guard and the
// store see it as an observation: a downstream's result may be of any
// size, a client's request may not.
func (g *Gateway) bound(observation string) string {
	text, _ := prompt.ElideBytes(observation, int(min(g.opts.Guard.MaxBodyBytes(), math.MaxInt32)))
	return text
}

// assessRequest is the guard's request for a call, parsed by serve's
// strict parser from what the client sent: the call, the previous call's
// result and the new user messages. A refusal names the field at fault.
func (s *session) assessRequest(name string, args json.RawMessage, meta string) (*serve.AssessRequest, error) {
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	body := map[string]any{"action": map[string]any{"name": name, "arguments": args}}
	if s.observation != nil {
		body["observation"] = *s.observation
	}
	if _, msgs := s.userTurn(meta); len(msgs) > 0 {
		body["user_messages"] = msgs
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	req, err := serve.ParseAssess(data)
	if err != nil {
		return nil, errors.New(strings.TrimPrefix(err.Error(), "action."))
	}
	return req, nil
}

// step runs the guard's step for req, creating the guard session at the
// session's first call. The user's request it learns is kept once a step
// is applied.
func (s *session) step(ctx context.Context, req *serve.AssessRequest, meta string) (*serve.AssessResponse, error) {
	if s.guardID == "" {
		create, _ := s.userTurn(meta)
		id, err := s.g.opts.Guard.CreateSession(s.owner, &serve.CreateRequest{UserPrompt: create})
		if err != nil {
			return nil, err
		}
		s.guardID = id
		if create != NoTask {
			s.prompt = create
		}
		s.g.log.Info("guard session", "mcp_session", s.name, "session", id)
	}
	if !s.stepped { // the first step shows the memory the tools the client was shown
		req.ShownTools = s.guardSeesTools()
		if req.ShownTools == nil {
			req.ShownTools = []serve.Tool{}
		}
	}
	ans, err := s.g.opts.Guard.Assess(ctx, s.guardID, req)
	if err == nil {
		s.stepped = true
	}
	if err == nil && meta != "" {
		s.prompt = meta
	}
	return ans, err
}

// userTurn returns, for a call carrying the user's request meta (""
// none), the request to start the guard session with (when it has none:
// Options.Task, else meta, else NoTask) and the user messages new at this
// call (meta when it differs from the request the guard knows).
func (s *session) userTurn(meta string) (create string, messages []string) {
	known := s.prompt
	if s.guardID == "" {
		create = s.prompt
		if create == "" {
			create = meta
		}
		if create == "" {
			create = NoTask
		}
		known = create
	}
	if meta != "" && meta != known {
		messages = []string{meta}
	}
	return create, messages
}

// metaPrompt returns params._meta[MetaUserPrompt] ("" when absent).
func metaPrompt(meta mcp.Meta) (string, error) {
	v, ok := meta[MetaUserPrompt]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", rpcError(codeInvalidParams, "mageguard: _meta[%q] must be a string (the user's request)", MetaUserPrompt)
	}
	return s, nil
}

// blocked is the client's result for a blocked call.
func blocked(tool, guardID string, ans *serve.AssessResponse) *mcp.CallToolResult {
	text := fmt.Sprintf("mageguard blocked this call to %s: %s (guard score %.2f; guard session %s, step %d). "+
		"The call was not run. Further tool calls of this session are refused until an operator resumes it.",
		tool, strings.TrimSpace(ans.Rationale), ans.Score, guardID, ans.Step)
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: text}},
		Meta: mcp.Meta{"mageguard/decision": map[string]any{"decision": ans.Decision, "score": ans.Score,
			"rationale": ans.Rationale, "session": guardID, "step": ans.Step}},
	}
}

// observationText is a call's result as the guard's memory reads it: its
// text content, with other content named and sized; its structured
// content when there is no other; or what went wrong.
func observationText(res *mcp.CallToolResult, err error) string {
	if err != nil {
		return "(no result: " + err.Error() + ")"
	}
	if res == nil {
		return "(no result)"
	}
	var parts []string
	if res.IsError {
		parts = append(parts, "(the tool reported an error)")
	}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource link %s: %s]", c.URI, c.Name))
		case *mcp.EmbeddedResource:
			if r := c.Resource; r != nil && r.Text != "" {
				parts = append(parts, fmt.Sprintf("[resource %s]\n%s", r.URI, r.Text))
			} else if r != nil {
				parts = append(parts, fmt.Sprintf("[resource %s, %s, %d bytes]", r.URI, r.MIMEType, len(r.Blob)))
			}
		default:
			data, _ := json.Marshal(c)
			parts = append(parts, string(data))
		}
	}
	if len(res.Content) == 0 && res.StructuredContent != nil {
		data, _ := json.Marshal(res.StructuredContent)
		parts = append(parts, string(data))
	}
	return strings.Join(parts, "\n")
}

// audit writes r (stamped now) to the audit log, if any.
func (g *Gateway) audit(r *Record) error {
	if g.opts.Audit == nil {
		return nil
	}
	r.Time = g.now().UTC()
	return g.opts.Audit.Write(r)
}

// elide is the action as the guard's prompts show it.
func (g *Gateway) elide(a dataset.Action) dataset.Action {
	if g.opts.Elide == nil {
		return a
	}
	return g.opts.Elide(a)
}

func ptr[T any](v T) *T { return &v }
