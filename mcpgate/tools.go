package mcpgate

// The downstream's tools as the gateway lists them: every page, within
// mcp.max_list_pages, mcp.max_list_tools and mcp.max_list_bytes; checked against the pins
// (pins.go); shown to the client as approved (enforcing: a changed tool
// as its pinned definition, a new one not at all; --monitor: as listed).
// A client's tools/list, a tools/call of a tool the last listing lacks
// and the downstream's notifications/tools/list_changed list again.

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/rollout/prompt"
	"github.com/mageguard/mageguard/serve"
)

// EventToolChanged is the audit event of a tool whose definition differs
// from its pin, or a tool listed after the first listing.
const EventToolChanged = "tool_changed"

// toolView is a session's last listing, checked.
type toolView struct {
	byName    map[string]*checkedTool
	shown     []*mcp.Tool       // what the client is shown
	shownHash map[string]string // the hash of each tool's definition shown, by name
}

type checkedTool struct {
	*CheckedTool
	auditErr error // the change could not be audited: calls to the tool are refused
}

// listTools lists every page of the downstream's tools within the bounds.
func (s *session) listTools(ctx context.Context) ([]*mcp.Tool, error) {
	lim := s.g.opts.Limits
	var all []*mcp.Tool
	var size int64 // the tools' JSON so far
	cursor := ""
	for page := 1; ; page++ {
		if page > lim.MaxListPages {
			return nil, fmt.Errorf("the downstream MCP server %s listed more than %d pages of tools (mcp.max_list_pages)", s.g.downstream(), lim.MaxListPages)
		}
		res, err := s.down.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, err
		}
		all = append(all, res.Tools...)
		if len(all) > lim.MaxListTools {
			return nil, fmt.Errorf("the downstream MCP server %s listed more than %d tools (mcp.max_list_tools)", s.g.downstream(), lim.MaxListTools)
		}
		for _, t := range res.Tools {
			data, err := json.Marshal(t)
			if err != nil {
				return nil, fmt.Errorf("the downstream MCP server %s listed tool %q: %w", s.g.downstream(), t.Name, err)
			}
			if size += int64(len(data)); size > lim.MaxListBytes {
				return nil, fmt.Errorf("the downstream MCP server %s listed more than %d bytes of tools (mcp.max_list_bytes)", s.g.downstream(), lim.MaxListBytes)
			}
		}
		if res.NextCursor == "" {
			return all, nil
		}
		cursor = res.NextCursor
	}
}

// refreshTools lists the downstream's tools and checks them against the
// pins; each change not audited yet is audited (and then kept as pending
// in the pins). It becomes the session's view, unless the downstream said
// its list changed while it ran (the check that follows stores its own). A change whose record
// could not be written is shown as enforcing shows it (the pinned
// definition; a new tool not at all), with --monitor too.
func (s *session) refreshTools(ctx context.Context) (*toolView, error) {
	s.listMu.Lock()
	defer s.listMu.Unlock()
	return s.refreshLocked(ctx)
}

func (s *session) refreshLocked(ctx context.Context) (*toolView, error) {
	s.toolsMu.Lock()
	gen := s.toolsGen
	s.toolsMu.Unlock()
	tools, err := s.listTools(ctx)
	if err != nil {
		return nil, err
	}
	var checked []*CheckedTool
	if s.g.opts.Pins != nil {
		if checked, err = s.g.opts.Pins.Check(tools); err != nil {
			s.g.log.Error("tool pins", "error", err.Error())
			return nil, fmt.Errorf("mageguard: the tool pins could not be read or written: %w", err)
		}
	} else {
		for _, t := range tools {
			pin, err := PinTool(t, s.g.now())
			if err != nil {
				return nil, err
			}
			checked = append(checked, &CheckedTool{Tool: t, Pin: pin})
		}
	}
	v := &toolView{byName: map[string]*checkedTool{}, shownHash: map[string]string{}}
	for _, c := range checked {
		ct := &checkedTool{CheckedTool: c}
		v.byName[c.Tool.Name] = ct
		if c.Status != ToolApproved && c.Novel {
			ct.auditErr = s.auditChange(c)
		}
		switch {
		case c.Status == ToolApproved || s.g.opts.Monitor && ct.auditErr == nil:
			v.shown = append(v.shown, c.Tool)
			v.shownHash[c.Tool.Name] = c.Pin.Hash
		case c.Status == ToolChanged:
			t, err := c.Pinned.Tool()
			if err != nil {
				return nil, fmt.Errorf("mageguard: the pin of tool %q: %w", c.Tool.Name, err)
			}
			v.shown = append(v.shown, t)
			v.shownHash[c.Tool.Name] = c.Pinned.Hash
		}
	}
	s.toolsMu.Lock()
	if s.toolsGen == gen { // else the list changed meanwhile: this view may be older than the next listing's
		s.tools, s.lastView = v, v
	}
	s.toolsMu.Unlock()
	return v, nil
}

// guardSeesTools returns, for a session's first step, the tools its
// client was shown (as the guard session's declared tools, which its
// first memory update reads as untrusted content), and records them as
// what the guard knows. Under turn.
func (s *session) guardSeesTools() []serve.Tool {
	s.toolsMu.Lock()
	v := s.lastView
	s.toolsMu.Unlock()
	s.guardTools = map[string]string{}
	if v == nil {
		return nil
	}
	var out []serve.Tool
	for _, t := range v.shown {
		out = append(out, serveTool(t))
		s.guardTools[t.Name] = v.shownHash[t.Name]
	}
	return out
}

// approvedChanges returns, as text for the pending observation, the
// definitions the client is now shown that the guard has not seen: a
// change an operator approved (or, with --monitor, any change), a tool
// approved since. Under turn.
func (s *session) approvedChanges() string {
	s.toolsMu.Lock()
	v := s.lastView
	s.toolsMu.Unlock()
	if v == nil || s.guardTools == nil {
		return ""
	}
	var b strings.Builder
	for _, t := range v.shown {
		h := v.shownHash[t.Name]
		if old, ok := s.guardTools[t.Name]; ok && old == h {
			continue
		}
		st := serveTool(t)
		fmt.Fprintf(&b, toolNowShown, t.Name, prompt.ToolsText([]dataset.Tool{{Name: st.Name, Description: st.Description, Parameters: st.Parameters}}))
		s.guardTools[t.Name] = h
	}
	return b.String()
}

// toolNowShown introduces, in the pending observation, a tool definition
// the client is shown since the guard last saw the tools.
const toolNowShown = "\n\n[the agent is now shown this definition of the tool %s (changed or added since the guard last saw the tools):]\n%s"

// serveTool is a tool as a guard session declares it.
func serveTool(t *mcp.Tool) serve.Tool {
	st := serve.Tool{Name: t.Name, Description: t.Description}
	if t.Title != "" && t.Description == "" {
		st.Description = t.Title
	}
	if !isNilValue(t.InputSchema) {
		if data, err := json.Marshal(t.InputSchema); err == nil {
			st.Parameters = data
		}
	}
	return st
}

// auditChange writes a tool change's record, then keeps the change as
// pending in the pins (so it is audited once).
func (s *session) auditChange(c *CheckedTool) error {
	rec := &Record{Event: EventToolChanged, MCPSession: s.name, Owner: s.owner, Tool: c.Tool.Name,
		NewHash: c.Pin.Hash, Fields: c.Changed, Monitor: s.g.opts.Monitor}
	if c.Pinned != nil {
		rec.OldHash = c.Pinned.Hash
	} else {
		rec.Fields = []string{"new tool"}
	}
	if err := s.g.audit(rec); err != nil {
		s.g.log.Error("audit", "error", err.Error())
		return err
	}
	s.g.log.Warn("tool changed", "mcp_session", s.name, "tool", c.Tool.Name, "fields", strings.Join(rec.Fields, ","))
	if err := s.g.opts.Pins.Seen(c); err != nil {
		s.g.log.Error("tool pins", "error", err.Error())
	}
	return nil
}

// tool returns a tool of the downstream as last listed, listing again
// when the last listing lacks it or did not approve it (an operator may
// have approved it since), or when its pin is no longer the approved one
// (an operator revoked or replaced it since) (nil: the downstream does
// not list it).
func (s *session) tool(ctx context.Context, name string) (*checkedTool, error) {
	s.toolsMu.Lock()
	v := s.tools
	s.toolsMu.Unlock()
	if v != nil {
		if c := v.byName[name]; c != nil && c.auditErr == nil && c.Status == ToolApproved && s.stillApproved(c) {
			return c, nil
		}
	}
	v, err := s.refreshTools(ctx)
	if err != nil {
		return nil, err
	}
	return v.byName[name], nil
}

// stillApproved reports whether a tool approved at the last listing is
// approved in the pins as they are now (no pins: always).
func (s *session) stillApproved(c *checkedTool) bool {
	if s.g.opts.Pins == nil {
		return true
	}
	ok, err := s.g.opts.Pins.Approved(c.Tool.Name, c.Pin.Hash)
	if err != nil {
		s.g.log.Error("tool pins", "error", err.Error())
	}
	return ok && err == nil
}

// listForClient answers a client's tools/list: every approved tool, in
// one page.
func (s *session) listForClient(ctx context.Context, p mcp.Params) (mcp.Result, error) {
	if lp, ok := p.(*mcp.ListToolsParams); ok && lp != nil && lp.Cursor != "" {
		return nil, rpcError(codeInvalidParams, "mageguard: tools/list has one page (no cursor to follow)")
	}
	v, err := s.refreshTools(ctx)
	if err != nil {
		return nil, downstreamError(ctx, err)
	}
	return &mcp.ListToolsResult{Tools: v.shown}, nil
}

// toolsChanged runs the check after the downstream's
// notifications/tools/list_changed (the notification goes on to the
// client): one check at a time, later notifications meanwhile coalesced.
func (s *session) toolsChanged() {
	s.toolsMu.Lock()
	s.tools = nil
	s.toolsGen++
	s.toolsMu.Unlock()
	if !s.refreshQueued.CompareAndSwap(false, true) {
		return
	}
	go func() {
		<-s.connected // the downstream may say so during its handshake
		if s.down == nil {
			return
		}
		s.listMu.Lock()
		defer s.listMu.Unlock()
		s.refreshQueued.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := s.refreshLocked(ctx); err != nil {
			s.g.log.Error("tools/list after list_changed", "mcp_session", s.name, "error", err.Error())
		}
	}()
}

// unapproved is the client's refusal of a call to a tool that is not
// approved.
func unapproved(c *checkedTool) string {
	if c.Status == ToolNew {
		return fmt.Sprintf("mageguard: the tool %q is not approved: it was not in the downstream MCP server's first listing "+
			"(or its pin was revoked); the call was not run. An operator can approve it (mageguard mcp tools approve %s).", c.Tool.Name, c.Tool.Name)
	}
	return fmt.Sprintf("mageguard: the tool %q changed since it was approved (%s differ from the pinned definition %s; now %s); "+
		"the call was not run. An operator can review and approve the change (mageguard mcp tools approve %s).",
		c.Tool.Name, strings.Join(c.Changed, ", "), c.Pinned.Hash, c.Pin.Hash, c.Tool.Name)
}

// flag is the decision record's flag of a call to a tool that is not
// approved.
func flag(c *checkedTool) string {
	if c.Status == ToolNew {
		return "tool_not_approved: new tool"
	}
	return "tool_changed: " + strings.Join(c.Changed, ", ")
}

// isNilValue reports whether v is nil or a nil pointer, map or slice.
func isNilValue(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		return r.IsNil()
	}
	return false
}
