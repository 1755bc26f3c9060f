package serve

// The server: routes, authentication, the middleware every request goes
// through, and the lifecycle (New, SetGuard, Close). The handlers are in
// handlers.go, the worker that batches steps across sessions in
// batcher.go.

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/serve/store"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the API's OpenAPI 3 description (served at /openapi.yaml).
func OpenAPI() []byte { return slices.Clone(openAPI) }

// Options configure a Server.
type Options struct {
	Config  Config         // the serve section
	Rollout rollout.Config // temperature, top_k, top_p of sampled decoding (serve.greedy: false)
	Store   store.Store    // the sessions database
	// Token is the bearer token every /v1/ request must carry, one
	// operator's (OperatorToken); Tokens, when set, are the tokens of
	// several principals instead. Neither turns authentication off (the
	// command allows that only on loopback).
	Token  string
	Tokens *Tokens
	Log    *slog.Logger // request and batch logs (nil: discarded)
}

// Server is the guard service. Build it with New, hand it the guard with
// SetGuard once the model is loaded, serve Handler, and Close it.
type Server struct {
	cfg     Config
	store   store.Store
	tokens  *Tokens // nil: no authentication
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *metrics
	batcher *batcher // decides the assessed steps
	claims  claims   // sessions with a request in progress
	now     func() time.Time

	stopJanitor, janitorDone chan struct{} // the idle sessions' janitor (serve.session_idle_s)
	closeOnce                sync.Once
}

// handlerFunc is a route's handler: it returns the status it wrote, or an
// error for wrap to answer (an *APIError, else 500).
type handlerFunc func(w http.ResponseWriter, r *http.Request) (int, error)

// New builds a server over an open store. It is not ready (assess and
// /healthz answer 503) until SetGuard.
func New(opts Options) (*Server, error) {
	if err := opts.Config.Validate(); err != nil {
		return nil, fmt.Errorf("serve.%w", err)
	}
	if opts.Store == nil {
		return nil, errors.New("serve: no store")
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{cfg: opts.Config, store: opts.Store, log: log, now: time.Now}
	s.tokens = opts.Tokens
	if s.tokens == nil && opts.Token != "" {
		s.tokens = OperatorToken(opts.Token)
	}
	s.metrics = newMetrics(func() int { return s.batcher.queued() })
	s.metrics.usage = s.store.Usage
	s.metrics.damaged = func() bool { return s.store.Damaged() != nil }
	s.store.SetLimits(store.Limits{MaxSessions: opts.Config.MaxSessions, MaxBytes: opts.Config.MaxStateBytes,
		MaxSessionsPerTenant: opts.Config.MaxSessionsPerTenant, MaxBytesPerTenant: opts.Config.MaxStateBytesPerTenant})
	s.batcher = newBatcher(opts.Config, opts.Rollout, opts.Store, s.metrics, log, s.now)
	s.batcher.shareKey = s.shareKey
	s.routes()
	s.stopJanitor = make(chan struct{})
	s.janitorDone = make(chan struct{})
	go s.janitor()
	return s, nil
}

// SetGuard makes the server ready: the worker starts gathering batches for g.
func (s *Server) SetGuard(g Stepper) { s.batcher.setGuard(g) }

// Ready reports whether the guard is set.
func (s *Server) Ready() bool { return s.batcher.ready() }

// Close stops the worker after the batch it runs and answers the steps
// still queued with 503 (not applied). Call it after the HTTP server's
// Shutdown; the store stays open.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.stopJanitor)
		<-s.janitorDone
	})
	s.batcher.close()
}

// janitor deletes the sessions idle for serve.session_idle_s (nothing when
// it is 0), checking every tenth of that (at least every second, at most
// every minute), until Close. A session with a request in progress is
// left alone.
func (s *Server) janitor() {
	defer close(s.janitorDone)
	idle := s.cfg.idle()
	if idle <= 0 {
		<-s.stopJanitor
		return
	}
	tick := time.NewTicker(min(max(idle/10, time.Second), time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-s.stopJanitor:
			return
		case <-tick.C:
			s.expireIdle()
		}
	}
}

// expireIdle deletes the sessions idle for serve.session_idle_s.
func (s *Server) expireIdle() {
	before := s.now().Add(-s.cfg.idle())
	ids, err := s.store.Idle(before)
	if err != nil {
		s.log.Error("idle sessions", "error", err.Error())
		return
	}
	n := 0
	for _, id := range ids {
		if s.claims.claim(id) != nil {
			continue // in use
		}
		deleted, err := s.store.DeleteIdle(id, before)
		s.claims.release(id)
		if err != nil {
			s.log.Error("idle sessions", "error", err.Error())
			return
		}
		if deleted {
			n++
		}
	}
	if n > 0 {
		s.metrics.sessionsExpired(n)
		s.log.Info("expired idle sessions", "sessions", n, "idle_s", s.cfg.SessionIdleS)
	}
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler { return s.mux }

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	v1 := func(pattern string, h handlerFunc) {
		s.mux.Handle(pattern, s.wrap(pattern, true, h))
	}
	open := func(pattern string, h handlerFunc) {
		s.mux.Handle(pattern, s.wrap(pattern, false, h))
	}
	v1("POST /v1/sessions", s.create)
	v1("GET /v1/sessions", s.list)
	v1("POST /v1/sessions/{id}/assess", onSession(s, assessRoute, s.assess))
	v1("POST /v1/sessions/{id}/resume", onSession(s, resumeRoute, s.resume))
	v1("POST /v1/sessions/{id}/steps/{n}/label", onSession(s, labelRoute, s.label))
	v1("POST /v1/sessions/{id}/steps/{n}/result", onSession(s, resultRoute, s.result))
	v1("GET /v1/sessions/{id}", onSession(s, getRoute, s.get))
	v1("DELETE /v1/sessions/{id}", onSession(s, removeRoute, s.remove))
	v1("/v1/", func(w http.ResponseWriter, r *http.Request) (int, error) {
		return 0, &APIError{Status: 404, Code: "not_found", Message: "no such route"}
	})
	open("GET /healthz", s.health)
	open("GET /metrics", func(w http.ResponseWriter, r *http.Request) (int, error) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		return 200, s.metrics.write(w)
	})
	open("GET /openapi.yaml", func(w http.ResponseWriter, r *http.Request) (int, error) {
		w.Header().Set("Content-Type", "application/yaml")
		_, err := w.Write(openAPI)
		return 200, err
	})
	open("/", func(w http.ResponseWriter, r *http.Request) (int, error) {
		return 0, &APIError{Status: 404, Code: "not_found", Message: "no such route"}
	})
}

// wrap adds authentication (for /v1/), JSON error answers, metrics and a
// log line to a handler. A handler returns the status it wrote, or an
// error to answer (an *APIError, else 500).
func (s *Server) wrap(route string, auth bool, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		var status int
		var err error
		if p, ok := s.principal(r); auth && !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mageguard"`)
			err = &APIError{Status: 401, Code: "unauthorized", Message: "missing or wrong bearer token (Authorization: Bearer TOKEN)"}
		} else {
			status, err = h(w, r.WithContext(withPrincipal(r.Context(), p)))
		}
		if err != nil {
			ae, ok := isAPIError(err)
			if !ok {
				s.log.Error("internal error", "route", route, "error", err.Error())
				ae = &APIError{Status: 500, Code: "internal", Message: "internal error"}
			}
			if ae.cause != nil {
				s.log.Error("store failed", "route", route, "error", ae.cause.Error())
			}
			if ae.retryAfter != "" {
				w.Header().Set("Retry-After", ae.retryAfter)
			}
			status = ae.Status
			writeJSON(w, ae.Status, ErrorBody{Error: *ae})
		}
		d := time.Since(start)
		s.metrics.request(route, status, d.Seconds())
		attrs := []any{"method", r.Method, "route", route, "status", status, "ms", d.Milliseconds()}
		if id := r.PathValue("id"); id != "" && validID(id) {
			attrs = append(attrs, "session", id)
		}
		if err != nil {
			attrs = append(attrs, "error", err.Error()) // our message; untrusted parts are quoted in it
		}
		s.log.Info("request", attrs...)
	})
}

// principal returns the principal of a request's bearer token (compared
// in constant time, tenants.go); without authentication, an operator.
func (s *Server) principal(r *http.Request) (Principal, bool) {
	if s.tokens == nil {
		return Principal{Role: RoleOperator}, true
	}
	return s.tokens.Lookup(BearerToken(r))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		status = 500
		buf.Reset()
		buf.WriteString(`{"error":{"code":"internal","message":"internal error"}}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}
