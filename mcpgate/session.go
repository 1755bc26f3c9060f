package mcpgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
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
	connected chan struct{} // closed when the downstream's handshake is over (down set, or nil: it failed)
	readyOnce sync.Once
	inflight  related         // the client's requests in progress
	pending   pendingRequests // the downstream's requests awaiting the client's answer
	dropped   atomic.Int64    // the downstream's notifications dropped past mcp.max_notifications_per_call

	turn chan struct{} // holds one tool call at a time (capacity 1)
	// Under turn: the guard session and what its next step needs.
	guardID     string  // "" until the session's first tools/call
	prompt      string  // the latest user request the guard session knows ("" for NoTask)
	observation *string // the last assessed call's result (nil before the first step)
	stepped     bool    // the guard session has had its first step

	listMu        sync.Mutex  // one listing at a time
	refreshQueued atomic.Bool // a check after list_changed is waiting for listMu
	toolsMu       sync.Mutex
	tools         *toolView // the last listing, checked (nil: none, or stale)
	lastView      *toolView // the last listing, even when stale
	// toolsGen counts the downstream's list_changed notifications: a
	// listing stores its view only if none came while it ran.
	toolsGen uint64
	// guardTools are the definitions the guard was shown (name: hash);
	// under turn, set at the session's first step.
	guardTools map[string]string
}

// connect starts the downstream session of client session ss: the
// protocol version the client negotiated, the client's capabilities and
// name, so the downstream sees the client it serves.
func (g *Gateway) connect(ss *mcp.ServerSession, params *mcp.InitializeParams, version, owner string) (*session, error) {
	t, err := g.opts.Dial()
	if err != nil {
		return nil, err
	}
	s := &session{g: g, client: ss, name: newSessionName(), owner: owner, ready: make(chan struct{}), connected: make(chan struct{}),
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
	down, err := client.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: version})
	s.down = down
	close(s.connected)
	if err != nil {
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
	res, _, err := s.forwardCounted(ctx, method, p)
	return res, err
}

// forwardCounted is forward, also returning how many of the downstream's
// notifications during the request were dropped past
// mcp.max_notifications_per_call.
func (s *session) forwardCounted(ctx context.Context, method string, p mcp.Params) (mcp.Result, int64, error) {
	if isNil(p) {
		p = nil
	}
	rel, remove := s.inflight.add(ctx, p)
	res, err := s.toDown(ctx, method, &mcp.ClientRequest[mcp.Params]{Session: s.down, Params: p})
	remove()
	if n := rel.dropped.Load(); n > 0 {
		s.g.log.Warn("notifications dropped", "mcp_session", s.name, "method", method, "dropped", n)
	}
	if err != nil {
		return nil, rel.dropped.Load(), downstreamError(ctx, err)
	}
	return res, rel.dropped.Load(), nil
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
		notification := strings.HasPrefix(method, "notifications/")
		if !notification {
			done, err := s.pending.take(p, s.g.opts.Limits)
			if err != nil {
				s.g.log.Warn("downstream request refused", "mcp_session", s.name, "method", method, "error", err.Error())
				return nil, err
			}
			defer done()
			select {
			case <-s.ready:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		cctx, rel, stop := s.inflight.route(ctx, p)
		defer stop()
		if notification && rel != nil && rel.notes.Add(1) > int64(s.g.opts.Limits.MaxNotificationsPerCall) {
			rel.dropped.Add(1)
			s.dropped.Add(1)
			return nil, nil
		}
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
	mu    sync.Mutex
	next  int
	reqs  map[int]*relatedReq
	ended []*relatedReq // the last keepEnded ended requests with a progress token
}

type relatedReq struct {
	ctx   context.Context
	token any // the request's progress token, if any
	// notes counts the downstream's notifications sent in this request's
	// stream; past mcp.max_notifications_per_call they are dropped.
	notes, dropped atomic.Int64
}

// add records a request in progress; remove removes it.
func (r *related) add(ctx context.Context, p mcp.Params) (req *relatedReq, remove func()) {
	var token any
	if rp, ok := p.(mcp.RequestParams); ok {
		token = rp.GetProgressToken()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reqs == nil {
		r.reqs = map[int]*relatedReq{}
	}
	id := r.next
	r.next++
	req = &relatedReq{ctx: ctx, token: token}
	r.reqs[id] = req
	return req, func() {
		r.mu.Lock()
		delete(r.reqs, id)
		if token != nil { // its late progress still counts against its cap
			r.ended = append(r.ended, req)
			if len(r.ended) > keepEnded {
				r.ended = r.ended[1:]
			}
		}
		r.mu.Unlock()
	}
}

// keepEnded is how many ended requests with a progress token a session
// remembers: the downstream's notifications for a request are handled in
// order after its response may have been (the SDK answers a call as soon
// as its response is read, and queues what came before it), so a
// notification naming an ended request's token still counts against that
// request's mcp.max_notifications_per_call.
const keepEnded = 16

// route returns the context to send a downstream's message p with: the
// values of the client request it relates to (rel; nil: none) — the one
// whose progress token a progress notification names, else the only one
// in progress — and cancelled when downCtx or that request ends.
func (r *related) route(downCtx context.Context, p mcp.Params) (ctx context.Context, rel *relatedReq, stop func()) {
	var token any
	if pn, ok := p.(*mcp.ProgressNotificationParams); ok {
		token = pn.ProgressToken
	}
	base := context.Background()
	r.mu.Lock()
	for _, q := range r.reqs {
		if token != nil && q.token != nil && fmt.Sprint(q.token) == fmt.Sprint(token) {
			base, rel = q.ctx, q
			break
		}
		if token == nil && len(r.reqs) == 1 {
			base, rel = q.ctx, q
		}
	}
	if rel == nil && token != nil {
		for _, q := range slices.Backward(r.ended) {
			if fmt.Sprint(q.token) == fmt.Sprint(token) {
				rel = q // ended: sent with no request's context, as before
				break
			}
		}
	}
	r.mu.Unlock()
	ctx, cancel := context.WithCancel(base)
	after := context.AfterFunc(downCtx, cancel)
	return ctx, rel, func() { after(); cancel() }
}

// pendingRequests are the downstream's requests to the client (sampling,
// elicitation, roots) awaiting the client's answer: within
// mcp.max_pending_requests and mcp.max_pending_request_bytes (their
// params' JSON), one more is refused at once, so that a downstream
// cannot make the gateway hold requests a client never answers.
type pendingRequests struct {
	mu    sync.Mutex
	n     int
	bytes int64
}

// take counts a request in (done counts it out) or refuses it.
func (q *pendingRequests) take(p mcp.Params, lim Config) (done func(), err error) {
	size := int64(0)
	if p != nil {
		data, err := json.Marshal(p)
		if err != nil {
			return nil, rpcError(codeInvalidParams, "mageguard: %v", err)
		}
		size = int64(len(data))
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.n >= lim.MaxPendingRequests:
		return nil, rpcError(codeInternal, "mageguard: %d requests to the client are already waiting for its answer (mcp.max_pending_requests)", q.n)
	case q.bytes+size > lim.MaxPendingRequestBytes:
		return nil, rpcError(codeInternal, "mageguard: the requests to the client waiting for its answer would hold %d bytes, more than mcp.max_pending_request_bytes (%d)", q.bytes+size, lim.MaxPendingRequestBytes)
	}
	q.n++
	q.bytes += size
	return func() {
		q.mu.Lock()
		q.n--
		q.bytes -= size
		q.mu.Unlock()
	}, nil
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
