// Package mcpgate is the guard in front of MCP tools (docs/mcp.md): toward
// the client an MCP server, toward the tools a client of one downstream MCP
// server per client session. Everything but tools/call goes through as is,
// both ways (lists, resources, prompts, completions, logging, progress,
// sampling, elicitation, roots, notifications); each tools/call is one step
// of the guard loop (docs/design.md#the-guard-loop), run by a serve.Server
// — the same sessions, batching, storage and decision rule as mageguard
// serve — before the call is forwarded, or answered as blocked without
// reaching the downstream. Every decision is appended to an audit log
// before the call is forwarded.
package mcpgate

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/serve"
)

// MetaUserPrompt is the key of a tools/call's params._meta that may carry
// the user's request: the session's request at its first call (without
// --task), a new user message when it changes later. The gateway removes
// it before forwarding the call.
const MetaUserPrompt = "mageguard/user_prompt"

// NoTask is the user's request a guard session starts with when neither
// Options.Task nor MetaUserPrompt gives one: the memory then builds from
// the tool results alone.
const NoTask = "(not given: the guard was not told the user's request; judge the calls by the tool results alone)"

// Options configure a Gateway.
type Options struct {
	// Guard decides the steps: sessions, batching and storage (its guard
	// must be set before calls arrive; until then they wait or fail as
	// serve's do).
	Guard *serve.Server
	// Dial returns a transport to the downstream server; it is called
	// once per client session (a command is started once per session).
	Dial func() (mcp.Transport, error)
	// Monitor decides and records every call but forwards it whatever
	// the decision (a blocked session is resumed at once).
	Monitor bool
	// Task is the user's request of every session ("": none, or per call
	// in MetaUserPrompt).
	Task string
	// Audit receives every decision before the call is forwarded and every
	// outcome after (nil: none).
	Audit *Audit
	// Elide returns an action as the guard's prompts show it (for the
	// audit); nil: as it is.
	Elide func(dataset.Action) dataset.Action
	// Log receives the gateway's own events (nil: discarded).
	Log *slog.Logger
	// ConnectTimeout bounds the downstream's start and handshake (0: 30 s).
	ConnectTimeout time.Duration
	// Downstream names the downstream in errors and logs (its command or URL).
	Downstream string
	// Pins are the approved tool definitions (nil: every listed tool is
	// approved).
	Pins *Pins
	// Limits bound what a downstream or a client may make the gateway
	// hold (zero: DefaultConfig).
	Limits Config
}

// Gateway is the MCP server clients connect to. Serve Server over a
// transport (mcp.StdioTransport, the HTTP handler of HTTPHandler, an
// in-memory transport), then Close.
type Gateway struct {
	opts   Options
	server *mcp.Server
	log    *slog.Logger
	now    func() time.Time

	// toClient sends any request or notification to a client session: the
	// server's own sending handler, taken by a sending middleware.
	toClient mcp.MethodHandler

	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*session
	closed   bool
	// Client sessions open or starting (their downstream being
	// connected), in all and per owner: within mcp.max_client_sessions
	// and mcp.max_client_sessions_per_token.
	open    int
	byOwner map[string]int
}

// New builds a gateway.
func New(opts Options) (*Gateway, error) {
	if opts.Guard == nil || opts.Dial == nil {
		return nil, errors.New("mcpgate: Options.Guard and Options.Dial are required")
	}
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 30 * time.Second
	}
	if opts.Limits == (Config{}) {
		opts.Limits = DefaultConfig()
	}
	if err := opts.Limits.Validate(); err != nil {
		return nil, fmt.Errorf("mcpgate: mcp.%w", err)
	}
	g := &Gateway{opts: opts, log: opts.Log, now: time.Now, sessions: map[*mcp.ServerSession]*session{}, byOwner: map[string]int{}}
	if g.log == nil {
		g.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// The protocol versions with the initialize handshake: a client of the
	// sessionless protocol is told to fall back to it, so every client
	// session has a downstream session of its own, started at initialize.
	var versions []string
	for _, v := range mcp.SupportedProtocolVersions() {
		if v < "2026-07-28" {
			versions = append(versions, v)
		}
	}
	g.server = mcp.NewServer(&mcp.Implementation{Name: "mageguard", Version: "1"}, &mcp.ServerOptions{
		Capabilities:              &mcp.ServerCapabilities{},
		SupportedProtocolVersions: versions,
	})
	g.server.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		g.toClient = next
		return next
	})
	g.server.AddReceivingMiddleware(g.receive)
	return g, nil
}

// Server is the MCP server toward the clients.
func (g *Gateway) Server() *mcp.Server { return g.server }

// ServeStdio serves one client session over newline-delimited JSON-RPC on
// in and out (a process's stdin and stdout, which it leaves open) until
// the client closes in or ctx ends. A message longer than
// serve.max_body_bytes (the guard's MaxBodyBytes) ends the session with an
// error: a stream cannot be read past a message it did not take whole.
func (g *Gateway) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	limit := int(min(g.opts.Guard.MaxBodyBytes(), math.MaxInt32))
	return g.server.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}, MaxLineLength: limit})
}

// nopWriteCloser is a writer that Close leaves open (the process's stdout).
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// Close ends every session's downstream connection (a command's process
// is asked to exit, then killed).
func (g *Gateway) Close() {
	g.mu.Lock()
	g.closed = true
	all := make([]*session, 0, len(g.sessions))
	for _, s := range g.sessions {
		all = append(all, s)
	}
	g.mu.Unlock()
	for _, s := range all {
		s.down.Close()
	}
}

// Sessions is the number of client sessions open.
func (g *Gateway) Sessions() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.sessions)
}

func (g *Gateway) session(ss *mcp.ServerSession) *session {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.sessions[ss]
}

// receive is the server's receiving middleware: initialize starts the
// downstream session, tools/call runs the guard, ping and the client's
// initialized notification are answered here, and everything else is
// forwarded to the client session's downstream as is.
func (g *Gateway) receive(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, _ := req.GetSession().(*mcp.ServerSession)
		switch method {
		case "initialize":
			return g.initialize(ctx, next, ss, req)
		case "ping", "notifications/cancelled":
			return next(ctx, method, req)
		}
		s := g.session(ss)
		if s == nil {
			return next(ctx, method, req) // the SDK refuses calls before initialize
		}
		switch method {
		case "notifications/initialized":
			s.readyOnce.Do(func() { close(s.ready) })
			return next(ctx, method, req)
		case "tools/call":
			return s.callTool(ctx, req.(*mcp.CallToolRequest))
		case "tools/list":
			return s.listForClient(ctx, req.GetParams())
		}
		return s.forward(ctx, method, req.GetParams())
	}
}

// initialize lets the SDK negotiate the protocol version with the client,
// starts the downstream session at that version with the client's
// capabilities and name, and answers with the downstream's capabilities,
// instructions and name.
func (g *Gateway) initialize(ctx context.Context, next mcp.MethodHandler, ss *mcp.ServerSession, req mcp.Request) (mcp.Result, error) {
	res, err := next(ctx, "initialize", req)
	if err != nil {
		return nil, err
	}
	ir, ok := res.(*mcp.InitializeResult)
	params, ok2 := req.GetParams().(*mcp.InitializeParams)
	if !ok || !ok2 {
		return nil, fmt.Errorf("mcpgate: initialize: unexpected %T, %T", res, req.GetParams())
	}
	owner := ""
	if sr, ok := req.(*mcp.ServerRequest[*mcp.InitializeParams]); ok && sr.Extra != nil && sr.Extra.TokenInfo != nil {
		owner = sr.Extra.TokenInfo.UserID
	}
	if err := g.reserve(owner); err != nil {
		g.log.Warn("session refused", "owner", owner, "error", err.Error())
		// The refused session holds nothing once its answer is sent.
		context.AfterFunc(ctx, func() { ss.Close() })
		return nil, err
	}
	s, err := g.connect(ss, params, ir.ProtocolVersion, owner)
	if err != nil {
		g.release(owner)
		g.log.Error("downstream", "error", err.Error())
		return nil, rpcError(codeInternal, "mageguard: could not start the downstream MCP server: %v", err)
	}
	di := s.down.InitializeResult()
	ir.Capabilities, ir.Instructions, ir.ServerInfo = di.Capabilities, di.Instructions, di.ServerInfo
	if ir.Capabilities == nil {
		ir.Capabilities = &mcp.ServerCapabilities{}
	}
	return ir, nil
}

// register adds a client session, or reports that the gateway is closed.
func (g *Gateway) register(s *session) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.sessions[s.client] = s
	return true
}

func (g *Gateway) unregister(s *session) {
	g.mu.Lock()
	delete(g.sessions, s.client)
	g.mu.Unlock()
	g.release(s.owner)
}

// reserve takes a client session's place within mcp.max_client_sessions
// and mcp.max_client_sessions_per_token, before its downstream is
// started; release gives it back when the session ends (or fails to
// start).
func (g *Gateway) reserve(owner string) error {
	lim := g.opts.Limits
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.open >= lim.MaxClientSessions:
		return rpcError(codeInternal, "mageguard: too many client sessions: %d are open (mcp.max_client_sessions); close one, or wait for an idle one to be closed", g.open)
	case g.byOwner[owner] >= lim.MaxClientSessionsPerToken:
		return rpcError(codeInternal, "mageguard: too many client sessions for this token: %d are open (mcp.max_client_sessions_per_token); close one, or wait for an idle one to be closed", g.byOwner[owner])
	}
	g.open++
	g.byOwner[owner]++
	return nil
}

func (g *Gateway) release(owner string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open--
	if g.byOwner[owner]--; g.byOwner[owner] <= 0 {
		delete(g.byOwner, owner)
	}
}

// downstream names the downstream in errors.
func (g *Gateway) downstream() string {
	if g.opts.Downstream == "" {
		return "(unnamed)"
	}
	return fmt.Sprintf("%q", g.opts.Downstream)
}

// newSessionName is the audit's name of a client session: "m_" and 16
// random base32 characters.
func newSessionName() string {
	return "m_" + rand.Text()[:16]
}
