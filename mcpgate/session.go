package mcpgate

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// session is one client session and its downstream session.
type session struct {
	g      *Gateway
	client *mcp.ServerSession // toward the client
	down   *mcp.ClientSession // toward the downstream server
	// toDown sends any request or notification to the downstream: the
	// downstream client's own sending handler, taken by a middleware.
	toDown mcp.MethodHandler
	name   string // the audit's name of the client session
	owner  string // the name of the client's token ("" without authentication)

	ready     chan struct{} // closed when the client has sent notifications/initialized
	readyOnce sync.Once
	inflight  related // the client's requests in progress

	turn chan struct{} // holds one tool call at a time (capacity 1)
	// Under turn: the guard session and what its next step needs.
	guardID     string  // "" until the session's first tools/call
	prompt      string  // the latest user request the guard session knows ("" for NoTask)
	observation *string // the last assessed call's result (nil before the first step)

	listMu        sync.Mutex  // one listing at a time
	refreshQueued atomic.Bool // a check after list_changed is waiting for listMu
	toolsMu       sync.Mutex
	tools         *toolView // the last listing, checked (nil: none, or stale)
}

// connect starts the downstream session of client session ss: the
// protocol version the client negotiated, the client's capabilities and
// name, so the downstream sees the client it serves.
func (g *Gateway) connect(ss *mcp.ServerSession, params *mcp.InitializeParams, version, owner string) (*session, error) {
	t, err := g.opts.Dial()
	if err != nil {
		return nil, err
	}
	s := &session{g: g, client: ss, name: newSessionName(), owner: owner, ready: make(chan struct{}),
		turn: make(chan struct{}, 1), prompt: g.opts.Task}
	caps := &mcp.ClientCapabilities{}
	if params.Capabilities != nil {
		c := *params.Capabilities
		caps = &c
	}
	impl := params.ClientInfo
	if impl == nil {
		impl = &mcp.Implementation{Name: "mageguard", Version: "1"}
	}
	client := mcp.NewClient(impl, &mcp.ClientOptions{Capabilities: caps, MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}})
	client.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		s.toDown = next
		return next
	})
	client.AddReceivingMiddleware(s.fromDown)
	ctx, cancel := context.WithTimeout(context.Background(), g.opts.ConnectTimeout)
	defer cancel()
	if s.down, err = client.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: version}); err != nil {
		return nil, err
	}
	if !g.register(s) {
		s.down.Close()
		return nil, errors.New("the gateway is closing")
	}
	g.log.Info("session", "mcp_session", s.name, "owner", owner, "client", impl.Name, "protocol", version)
	go func() {
		err := s.down.Wait()
		g.log.Info("downstream closed", "mcp_session", s.name, "error", fmt.Sprint(err))
		ss.Close() // the client's requests in progress end with the downstream's error first
	}()
	go func() {
		ss.Wait()
		s.down.Close()
		g.unregister(s)
		g.log.Info("session closed", "mcp_session", s.name)
	}()
	return s, nil
}

// forward sends a client's request or notification to the downstream as
// it came and returns the downstream's answer.
func (s *session) forward(ctx context.Context, method string, p mcp.Params) (mcp.Result, error) {
	if isNil(p) {
		p = nil
	}
	defer s.inflight.add(ctx, p)()
	res, err := s.toDown(ctx, method, &mcp.ClientRequest[mcp.Params]{Session: s.down, Params: p})
	if err != nil {
		return nil, downstreamError(ctx, err)
	}
	return res, nil
}

// fromDown is the downstream client's receiving middleware: a ping is
// answered here; every other request or notification of the downstream
// goes to the client as it came, in the stream of the client's request it
// relates to. Requests wait until the client has finished initializing.
func (s *session) fromDown(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "ping", "notifications/cancelled":
			return next(ctx, method, req)
		case "notifications/tools/list_changed":
			s.toolsChanged()
		}
		p := req.GetParams()
		if isNil(p) {
			p = nil
		}
		if !strings.HasPrefix(method, "notifications/") {
			select {
			case <-s.ready:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		cctx, stop := s.inflight.route(ctx, p)
		defer stop()
		res, err := s.g.toClient(cctx, method, &mcp.ServerRequest[mcp.Params]{Session: s.client, Params: p})
		if err != nil {
			var we *jsonrpc.Error
			if errors.As(err, &we) {
				return nil, we
			}
			return nil, rpcError(codeInternal, "mageguard: the client did not answer: %v", err)
		}
		return res, nil
	}
}

// related are a session's client requests in progress, so that what the
// downstream sends while serving one (progress, logging, sampling,
// elicitation) reaches the client in that request's stream.
type related struct {
	mu   sync.Mutex
	next int
	reqs map[int]relatedReq
}

type relatedReq struct {
	ctx   context.Context
	token any // the request's progress token, if any
}

// add records a request in progress; the returned function removes it.
func (r *related) add(ctx context.Context, p mcp.Params) func() {
	var token any
	if rp, ok := p.(mcp.RequestParams); ok {
		token = rp.GetProgressToken()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reqs == nil {
		r.reqs = map[int]relatedReq{}
	}
	id := r.next
	r.next++
	r.reqs[id] = relatedReq{ctx: ctx, token: token}
	return func() {
		r.mu.Lock()
		delete(r.reqs, id)
		r.mu.Unlock()
	}
}

// route returns the context to send a downstream's message p with: the
// values of the client request it relates to — the one whose progress
// token a progress notification names, else the only one in progress —
// and cancelled when downCtx or that request ends.
func (r *related) route(downCtx context.Context, p mcp.Params) (context.Context, context.CancelFunc) {
	var token any
	if pn, ok := p.(*mcp.ProgressNotificationParams); ok {
		token = pn.ProgressToken
	}
	base := context.Background()
	r.mu.Lock()
	for _, q := range r.reqs {
		if token != nil && q.token != nil && fmt.Sprint(q.token) == fmt.Sprint(token) {
			base = q.ctx
			break
		}
		if token == nil && len(r.reqs) == 1 {
			base = q.ctx
		}
	}
	r.mu.Unlock()
	ctx, cancel := context.WithCancel(base)
	stop := context.AfterFunc(downCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

// JSON-RPC error codes the gateway answers with.
const (
	codeInvalidParams = -32602
	codeInternal      = -32603
)

func rpcError(code int64, format string, args ...any) *jsonrpc.Error {
	return &jsonrpc.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// downstreamError is the client's error for a failed forwarded request:
// the downstream's own JSON-RPC error unchanged, else what went wrong.
func downstreamError(ctx context.Context, err error) error {
	var we *jsonrpc.Error
	switch {
	case errors.As(err, &we):
		return we
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, mcp.ErrConnectionClosed):
		return rpcError(codeInternal, "mageguard: the downstream MCP server closed the connection")
	}
	return rpcError(codeInternal, "mageguard: the downstream MCP server failed: %v", err)
}

// isNil reports whether p holds a nil pointer (params left out).
func isNil(p mcp.Params) bool {
	if p == nil {
		return true
	}
	v := reflect.ValueOf(p)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
