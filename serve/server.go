package serve

// The server: routes, authentication, the middleware every request goes
// through, the lifecycle (New, SetGuard, Close) and the handlers. The
// worker that batches steps across sessions is in batcher.go.

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mageguard/mageguard/rollout"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the API's OpenAPI 3 description (served at /openapi.yaml).
func OpenAPI() []byte { return slices.Clone(openAPI) }

// Options configure a Server.
type Options struct {
	Config  Config         // the serve section
	Rollout rollout.Config // temperature, top_k, top_p of sampled decoding (serve.greedy: false)
	Store   *Store         // the sessions database
	// Token is the bearer token every /v1/ request must carry; "" turns
	// authentication off (the command allows that only on loopback).
	Token string
	Log   *slog.Logger // request and batch logs (nil: discarded)
}

// Server is the guard service. Build it with New, hand it the guard with
// SetGuard once the model is loaded, serve Handler, and Close it.
type Server struct {
	cfg     Config
	store   *Store
	token   [sha256.Size]byte
	auth    bool
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *metrics
	batcher *batcher // decides the assessed steps

	mu   sync.Mutex
	busy map[string]bool // sessions with a request in progress

	now func() time.Time
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
	s := &Server{cfg: opts.Config, store: opts.Store, log: log, busy: map[string]bool{}, now: time.Now}
	if opts.Token != "" {
		s.auth, s.token = true, sha256.Sum256([]byte(opts.Token))
	}
	s.metrics = newMetrics(func() int { return s.batcher.queued() })
	s.batcher = newBatcher(opts.Config, opts.Rollout, opts.Store, s.metrics, log, s.now)
	s.routes()
	return s, nil
}

// SetGuard makes the server ready: the worker starts gathering batches for g.
func (s *Server) SetGuard(g Stepper) { s.batcher.setGuard(g) }

// Ready reports whether the guard is set.
func (s *Server) Ready() bool { return s.batcher.ready() }

// Close stops the worker after the batch it runs and answers the steps
// still queued with 503 (not applied). Call it after the HTTP server's
// Shutdown; the store stays open.
func (s *Server) Close() { s.batcher.close() }

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
	v1("POST /v1/sessions/{id}/assess", s.assess)
	v1("POST /v1/sessions/{id}/resume", s.resume)
	v1("GET /v1/sessions/{id}", s.get)
	v1("DELETE /v1/sessions/{id}", s.remove)
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
		if auth && !s.authorized(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mageguard"`)
			err = &APIError{Status: 401, Code: "unauthorized", Message: "missing or wrong bearer token (Authorization: Bearer TOKEN)"}
		} else {
			status, err = h(w, r)
		}
		if err != nil {
			ae, ok := isAPIError(err)
			if !ok {
				s.log.Error("internal error", "route", route, "error", err.Error())
				ae = &APIError{Status: 500, Code: "internal", Message: "internal error"}
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

// authorized checks the bearer token in constant time.
func (s *Server) authorized(r *http.Request) bool {
	if !s.auth {
		return true
	}
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(h[len(prefix):])))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
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

// readBody reads a request body within the size limit, refusing a
// Content-Type other than JSON.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
			return nil, &APIError{Status: 415, Code: "unsupported_media_type", Message: "the body must be JSON (Content-Type: application/json)"}
		}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, &APIError{Status: 413, Code: "body_too_large", Message: fmt.Sprintf("the body is larger than %d bytes (serve.max_body_bytes)", s.cfg.MaxBodyBytes)}
	}
	if err != nil {
		return nil, &APIError{Status: 400, Code: "bad_body", Message: "could not read the body"}
	}
	return data, nil
}

// Session ids: "s_" and 26 base32 characters of 128 random bits.
var (
	idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)
	idPattern  = regexp.MustCompile(`^s_[a-z2-7]{26}$`)
)

func newID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "s_" + idEncoding.EncodeToString(b), nil
}

func validID(id string) bool { return idPattern.MatchString(id) }

var errNoSession = &APIError{Status: 404, Code: "unknown_session", Message: "no such session"}

// sessionID returns the path's session id, or a 404 for one that is not
// of our form.
func sessionID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !validID(id) {
		return "", errNoSession
	}
	return id, nil
}

// claim marks a session as having a request in progress; release undoes
// it. A second request meanwhile gets 409.
func (s *Server) claim(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[id] {
		return &APIError{Status: 409, Code: "session_busy", Message: "another request of this session is in progress; send a session's steps one at a time"}
	}
	s.busy[id] = true
	return nil
}

func (s *Server) release(id string) {
	s.mu.Lock()
	delete(s.busy, id)
	s.mu.Unlock()
}

func storeError(err error) error {
	if errors.Is(err, ErrNotFound) {
		return errNoSession
	}
	return err
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) (int, error) {
	if !s.Ready() {
		writeJSON(w, 503, map[string]string{"status": "loading"})
		return 503, nil
	}
	writeJSON(w, 200, map[string]string{"status": "ok"})
	return 200, nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) (int, error) {
	data, err := s.readBody(w, r)
	if err != nil {
		return 0, err
	}
	req, err := ParseCreate(data)
	if err != nil {
		return 0, err
	}
	id, err := newID()
	if err != nil {
		return 0, err
	}
	sess := &Session{ID: id, UserPrompt: req.UserPrompt, Tools: req.Tools, CreatedAt: s.now().UTC(),
		Status: StatusActive, Resumes: []time.Time{}}
	if err := s.store.Create(sess); err != nil {
		return 0, err
	}
	s.metrics.sessionCreated()
	w.Header().Set("Location", "/v1/sessions/"+id)
	writeJSON(w, 201, map[string]string{"id": id})
	return 201, nil
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) (int, error) {
	id, err := sessionID(r)
	if err != nil {
		return 0, err
	}
	sess, steps, err := s.store.GetWithSteps(id)
	if err != nil {
		return 0, storeError(err)
	}
	writeJSON(w, 200, SessionView{Session: sess, Steps: steps})
	return 200, nil
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request) (int, error) {
	id, err := sessionID(r)
	if err != nil {
		return 0, err
	}
	if err := s.claim(id); err != nil {
		return 0, err
	}
	defer s.release(id)
	if err := s.store.Delete(id); err != nil {
		return 0, storeError(err)
	}
	w.WriteHeader(204)
	return 204, nil
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) (int, error) {
	id, err := sessionID(r)
	if err != nil {
		return 0, err
	}
	data, err := s.readBody(w, r)
	if err != nil {
		return 0, err
	}
	if err := ParseEmpty(data); err != nil {
		return 0, err
	}
	if err := s.claim(id); err != nil {
		return 0, err
	}
	defer s.release(id)
	sess, err := s.store.Get(id)
	if err != nil {
		return 0, storeError(err)
	}
	if sess.Status != StatusBlocked {
		return 0, &APIError{Status: 409, Code: "not_blocked", Message: "the session is not blocked"}
	}
	if _, err := s.store.Resume(id, s.now()); err != nil {
		return 0, err
	}
	sess, steps, err := s.store.GetWithSteps(id)
	if err != nil {
		return 0, storeError(err)
	}
	writeJSON(w, 200, SessionView{Session: sess, Steps: steps})
	return 200, nil
}

func (s *Server) assess(w http.ResponseWriter, r *http.Request) (int, error) {
	arrived := s.now()
	id, err := sessionID(r)
	if err != nil {
		return 0, err
	}
	data, err := s.readBody(w, r)
	if err != nil {
		return 0, err
	}
	req, err := ParseAssess(data)
	if err != nil {
		return 0, err
	}
	if err := s.claim(id); err != nil {
		return 0, err
	}
	defer s.release(id)
	sess, err := s.store.Get(id)
	if err != nil {
		return 0, storeError(err)
	}
	// A retry of an answered step gets the stored answer (idempotent).
	if req.Step != nil && *req.Step != sess.StepCount {
		if *req.Step > sess.StepCount {
			return 0, &APIError{Status: 409, Code: "step_conflict", Field: "step",
				Message: fmt.Sprintf("step: %d, but the session has %d steps (the next is %d)", *req.Step, sess.StepCount, sess.StepCount)}
		}
		st, err := s.store.GetStep(id, *req.Step)
		if err != nil {
			return 0, err
		}
		if st.Action.Name != req.Action.Name || !bytes.Equal(st.Action.Arguments, req.Action.Arguments) {
			return 0, &APIError{Status: 409, Code: "step_conflict", Field: "step",
				Message: fmt.Sprintf("step: %d was answered for another action", *req.Step)}
		}
		writeJSON(w, 200, answerOf(st))
		return 200, nil
	}
	if sess.Status == StatusBlocked {
		return 0, &APIError{Status: 409, Code: "session_blocked", Message: "the session is blocked: a step was blocked, and it stays so until POST /v1/sessions/{id}/resume"}
	}
	if len(sess.Tools) > 0 && !slices.ContainsFunc(sess.Tools, func(t Tool) bool { return t.Name == req.Action.Name }) {
		return 0, badField("action.name", "unknown_tool", "%s is not among the session's tools", strconv.Quote(req.Action.Name))
	}
	if sess.StepCount == 0 && req.Observation != nil {
		return 0, badField("observation", "invalid_value", "the session's first step has no previous action to observe")
	}
	resp, err := s.batcher.decide(r.Context(), id, sess, req, arrived)
	if err != nil {
		return 0, err
	}
	writeJSON(w, 200, resp)
	return 200, nil
}
