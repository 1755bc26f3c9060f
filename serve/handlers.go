package serve

// The handlers of the /v1/ routes. Every route on one session goes through
// one preamble, onSession: the session id, the body, its parsing, the
// session's claim and its reading from the store, in that order. A handler
// returns the status it wrote, or an error that wrap writes.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mageguard/mageguard/serve/store"
)

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

var (
	errNoSession = &APIError{Status: 404, Code: "unknown_session", Message: "no such session"}
	errNoStep    = &APIError{Status: 404, Code: "unknown_step", Message: "the session has no such step (steps count from 0, as GET /v1/sessions/{id} shows them)"}
)

// sessionID returns the path's session id, or a 404 for one that is not
// of our form.
func sessionID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !validID(id) {
		return "", errNoSession
	}
	return id, nil
}

// storeError is the answer to a store's error: 404 for no session, 503
// for a damaged database, 429 or 507 for a limit, else the error (500).
func storeError(err error) error {
	var damage *store.DamageError
	var limit *store.LimitError
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errNoSession
	case errors.Is(err, store.ErrNoStep):
		return errNoStep
	case errors.As(err, &damage):
		return &APIError{Status: 503, Code: "store_damaged", Message: "the sessions database is damaged; the server serves nothing until an operator checks it"}
	case errors.As(err, &limit) && (limit.Key == "max_sessions" || limit.Key == "max_sessions_per_tenant"):
		return &APIError{Status: 429, Code: "too_many_sessions", Message: limit.Error() + "; delete finished sessions (DELETE /v1/sessions/{id})"}
	case errors.As(err, &limit):
		return &APIError{Status: 507, Code: "state_full", Message: limit.Error() + "; delete finished sessions (DELETE /v1/sessions/{id})"}
	}
	if _, ok := isAPIError(err); ok || err == nil {
		return err
	}
	return storeFailed(err)
}

// storeFailed is the answer to a write or read the store could not do: 500
// store_failed, saying what to do when the disk is full.
func storeFailed(err error) *APIError {
	var full *store.DiskFullError
	switch {
	case errors.As(err, &full) && full.Reserve:
		return &APIError{Status: 500, Code: "store_failed", cause: err, Message: "the disk holding the sessions database is full; delete finished sessions (DELETE /v1/sessions/{id}: space is kept for deletes), or an operator frees space on that disk"}
	case errors.As(err, &full):
		return &APIError{Status: 500, Code: "store_failed", cause: err, Message: "the disk holding the sessions database is full, and the space kept for deletes is used; an operator must free space on that disk, then finished sessions can be deleted"}
	}
	return &APIError{Status: 500, Code: "store_failed", cause: err, Message: "the sessions database could not be read or written"}
}

// claims are the sessions with a request in progress: a request that may
// change a session claims it first, and a second one meanwhile gets 409.
type claims struct {
	mu   sync.Mutex
	busy map[string]bool
}

// claim marks session id as having a request in progress; release undoes it.
func (c *claims) claim(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.busy[id] {
		return &APIError{Status: 409, Code: "session_busy", Message: "another request of this session is in progress; send a session's steps one at a time"}
	}
	if c.busy == nil {
		c.busy = map[string]bool{}
	}
	c.busy[id] = true
	return nil
}

func (c *claims) release(id string) {
	c.mu.Lock()
	delete(c.busy, id)
	c.mu.Unlock()
}

// sessionRoute says what the preamble of a route on one session does
// besides reading the session id and the session.
type sessionRoute[T any] struct {
	parse func(body []byte) (T, error) // parses the body; nil: the route reads none
	claim bool                         // the route may change the session: hold its claim until the handler returns
	steps bool                         // read the session's steps too
	// operator, when set, makes the route an operator's alone (resume,
	// label): another principal's request is answered with it (403
	// operator_only), after the visibility check (another tenant's
	// session stays 404) and before the body and the claim.
	operator *APIError
}

// sessionCall is a request on one session, past the preamble.
type sessionCall[T any] struct {
	id      string
	req     T         // the parsed body
	sess    *Session  // as read (after the claim, when the route claims)
	steps   []Step    // the session's steps, when the route reads them
	arrived time.Time // when the request arrived, before its body was read
}

// onSession is the preamble every /v1/sessions/{id} route shares, then h:
// the path's session id (404 unless of our form); the body, read within
// serve.max_body_bytes and parsed; the session's claim (409 while another
// request of it is in progress); and the session read from the store (404
// unknown_session). A session the caller may not see (tenants.go) is 404
// before anything else, then an agent on an operator's route is 403. Its
// refusals are returned to wrap, which writes
// them.
func onSession[T any](s *Server, route sessionRoute[T], h func(w http.ResponseWriter, r *http.Request, c *sessionCall[T]) (int, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) (int, error) {
		c := &sessionCall[T]{arrived: s.now()}
		var err error
		if c.id, err = sessionID(r); err != nil {
			return 0, err
		}
		if err := s.visible(r.Context(), c.id); err != nil {
			return 0, err
		}
		if route.operator != nil && principalOf(r.Context()).Role != RoleOperator {
			return 0, route.operator
		}
		if route.parse != nil {
			data, err := s.readBody(w, r)
			if err != nil {
				return 0, err
			}
			if c.req, err = route.parse(data); err != nil {
				return 0, err
			}
		}
		if route.claim {
			if err := s.claims.claim(c.id); err != nil {
				return 0, err
			}
			defer s.claims.release(c.id)
		}
		if route.steps {
			c.sess, c.steps, err = s.store.GetWithSteps(c.id)
		} else {
			c.sess, err = s.store.Get(c.id)
		}
		if err != nil {
			return 0, storeError(err)
		}
		return h(w, r, c)
	}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) (int, error) {
	if err := s.store.Damaged(); err != nil {
		writeJSON(w, 503, map[string]string{"status": "damaged", "error": err.Error()})
		return 503, nil
	}
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
	id, err := s.CreateSession(principalOf(r.Context()).Name, req)
	if err != nil {
		return 0, err
	}
	w.Header().Set("Location", "/v1/sessions/"+id)
	writeJSON(w, 201, map[string]string{"id": id})
	return 201, nil
}

// noBody is the request of a route that reads no body.
type noBody struct{}

// parseEmpty is ParseEmpty as a sessionRoute parser.
func parseEmpty(data []byte) (noBody, error) { return noBody{}, ParseEmpty(data) }

// Routes on one session: what each preamble does.
var (
	getRoute    = sessionRoute[noBody]{steps: true}
	removeRoute = sessionRoute[noBody]{claim: true}
	resumeRoute = sessionRoute[noBody]{parse: parseEmpty, claim: true, operator: errOperatorOnly}
	// A label changes no state the guard reads: it takes no claim, so that
	// an operator can label a session while its agent runs.
	labelRoute  = sessionRoute[*LabelRequest]{parse: ParseLabel, operator: errLabelOperatorOnly}
	assessRoute = sessionRoute[*AssessRequest]{parse: ParseAssess, claim: true}
	// A result, as a label, changes no state the guard reads: no claim.
	resultRoute = sessionRoute[*ResultRequest]{parse: ParseResult}
)

func (s *Server) get(w http.ResponseWriter, r *http.Request, c *sessionCall[noBody]) (int, error) {
	writeJSON(w, 200, SessionView{Session: c.sess, Steps: c.steps})
	return 200, nil
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request, c *sessionCall[noBody]) (int, error) {
	if err := s.store.Delete(c.id); err != nil {
		return 0, storeError(err)
	}
	w.WriteHeader(204)
	return 204, nil
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request, c *sessionCall[noBody]) (int, error) {
	if err := s.resumeSession(c.id, c.sess); err != nil {
		return 0, err
	}
	sess, steps, err := s.store.GetWithSteps(c.id)
	if err != nil {
		return 0, storeError(err)
	}
	writeJSON(w, 200, SessionView{Session: sess, Steps: steps})
	return 200, nil
}

// label sets an operator's label on step n of the session: 404
// unknown_step for a step it does not have; the answer is the step with
// its label.
func (s *Server) label(w http.ResponseWriter, r *http.Request, c *sessionCall[*LabelRequest]) (int, error) {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 0 || strconv.Itoa(n) != r.PathValue("n") {
		return 0, errNoStep
	}
	l := store.StepLabel{Label: c.req.Label, Note: c.req.Note, By: principalOf(r.Context()).Name, At: s.now().UTC()}
	if err := s.store.SetLabel(c.id, n, l); err != nil {
		return 0, storeError(err)
	}
	st, err := s.store.GetStep(c.id, n)
	if err != nil {
		return 0, storeError(err)
	}
	writeJSON(w, 200, st)
	return 200, nil
}

// result records what step n's action returned: 404 unknown_step for a
// step the session does not have; the answer is the step with its result.
func (s *Server) result(w http.ResponseWriter, r *http.Request, c *sessionCall[*ResultRequest]) (int, error) {
	n, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || n < 0 || strconv.Itoa(n) != r.PathValue("n") {
		return 0, errNoStep
	}
	if err := s.RecordResult(c.id, n, c.req.Observation); err != nil {
		return 0, err
	}
	st, err := s.store.GetStep(c.id, n)
	if err != nil {
		return 0, storeError(err)
	}
	writeJSON(w, 200, st)
	return 200, nil
}

// resumeSession sets session id, as read under its claim (sess), active
// again: 409 not_blocked unless it is blocked.
func (s *Server) resumeSession(id string, sess *Session) error {
	if sess.Status != StatusBlocked {
		return &APIError{Status: 409, Code: "not_blocked", Message: "the session is not blocked"}
	}
	if _, err := s.store.Resume(id, s.now()); err != nil {
		return storeError(err)
	}
	return nil
}

func (s *Server) assess(w http.ResponseWriter, r *http.Request, c *sessionCall[*AssessRequest]) (int, error) {
	resp, err := s.assessStep(r.Context(), c.id, c.sess, c.req, c.arrived)
	if err != nil {
		return 0, err
	}
	writeJSON(w, 200, resp)
	return 200, nil
}

// assessStep answers an assess request req, which arrived at arrived, on
// session id (sess as read under its claim): the stored answer for a
// retry of an answered step, else the batcher's decision once stored.
// Refusals are *APIError.
func (s *Server) assessStep(ctx context.Context, id string, sess *Session, req *AssessRequest, arrived time.Time) (*AssessResponse, error) {
	// A retry of an answered step gets the stored answer (idempotent).
	if req.Step != nil && *req.Step != sess.StepCount {
		if *req.Step > sess.StepCount {
			return nil, &APIError{Status: 409, Code: "step_conflict", Field: "step",
				Message: fmt.Sprintf("step: %d, but the session has %d steps (the next is %d)", *req.Step, sess.StepCount, sess.StepCount)}
		}
		st, err := s.store.GetStep(id, *req.Step)
		if err != nil {
			return nil, storeError(err)
		}
		if field := differs(st, req); field != "" {
			return nil, &APIError{Status: 409, Code: "step_conflict", Field: "step",
				Message: fmt.Sprintf("step: %d was answered for another request (its %s differs from this one's); a retry must send the same body", *req.Step, field)}
		}
		return answerOf(st), nil
	}
	if sess.Status == StatusBlocked {
		return nil, &APIError{Status: 409, Code: "session_blocked", Message: "the session is blocked: a step was blocked, and it stays so until POST /v1/sessions/{id}/resume"}
	}
	if len(sess.Tools) > 0 && !slices.ContainsFunc(sess.Tools, func(t Tool) bool { return t.Name == req.Action.Name }) {
		return nil, badField("action.name", "unknown_tool", "%s is not among the session's tools", strconv.Quote(ShortText(req.Action.Name)))
	}
	if sess.StepCount == 0 && req.Observation != nil {
		return nil, badField("observation", "invalid_value", "the session's first step has no previous action to observe")
	}
	if u := s.store.Usage(); u.Bytes >= s.cfg.MaxStateBytes {
		return nil, storeError(&store.LimitError{Key: "max_state_bytes", Have: u.Bytes, Max: s.cfg.MaxStateBytes})
	}
	if max := s.cfg.MaxStateBytesPerTenant; max > 0 {
		if u := s.store.UsageOf(sess.Owner); u.Bytes >= max {
			return nil, storeError(&store.LimitError{Key: "max_state_bytes_per_tenant", Tenant: sess.Owner, Have: u.Bytes, Max: max})
		}
	}
	return s.batcher.decide(ctx, id, sess, req, arrived)
}

// differs names the first field in which a retried step's request differs
// from the stored step's ("" when none): the action's name or arguments,
// the observation, or the user messages.
func differs(st *Step, req *AssessRequest) string {
	switch {
	case st.Action.Name != req.Action.Name:
		return "action.name"
	case !bytes.Equal(st.Action.Arguments, req.Action.Arguments):
		return "action.arguments"
	case (st.Observation == nil) != (req.Observation == nil) || (st.Observation != nil && *st.Observation != *req.Observation):
		return "observation"
	case !slices.Equal(st.UserMessages, nonNil(req.UserMessages)):
		return "user_messages"
	}
	return ""
}
