package serve

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
	"sync/atomic"
	"time"

	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/prompt"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the API's OpenAPI 3 description (served at /openapi.yaml).
func OpenAPI() []byte { return slices.Clone(openAPI) }

// Stepper runs one step of the guard loop for many sessions at once
// (*rollout.Guard).
type Stepper interface {
	Step(inputs []rollout.StepInput, s generate.Sampling) ([]rollout.Turn, rollout.Stats, error)
}

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
	rollout rollout.Config
	store   *Store
	token   [sha256.Size]byte
	auth    bool
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *metrics

	guard atomic.Pointer[stepperBox] // nil until SetGuard
	queue chan *job

	mu   sync.Mutex
	busy map[string]bool // sessions with a request in progress

	stop, done chan struct{}
	once       sync.Once
	batchNo    uint64
	now        func() time.Time
}

type stepperBox struct{ Stepper }

// Job states: a queued job is taken by the worker or abandoned by its
// handler (deadline, client gone), never both.
const (
	jobQueued int32 = iota
	jobTaken
	jobAbandoned
)

// job is one assess request waiting for, or in, a generation batch.
type job struct {
	id       string
	in       rollout.StepInput
	req      *AssessRequest
	step     int // the step's index in the session
	arrived  time.Time
	deadline time.Time
	state    atomic.Int32
	done     chan outcome // buffered: the worker never blocks on it
}

type outcome struct {
	resp *AssessResponse
	err  *APIError
}

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
	s := &Server{
		cfg: opts.Config, rollout: opts.Rollout, store: opts.Store, log: log,
		queue: make(chan *job, opts.Config.QueueSize),
		busy:  map[string]bool{},
		stop:  make(chan struct{}), done: make(chan struct{}),
		now: time.Now,
	}
	if opts.Token != "" {
		s.auth, s.token = true, sha256.Sum256([]byte(opts.Token))
	}
	s.metrics = newMetrics(func() int { return len(s.queue) })
	s.routes()
	return s, nil
}

// SetGuard makes the server ready: the worker starts gathering batches for g.
func (s *Server) SetGuard(g Stepper) {
	if s.guard.Swap(&stepperBox{g}) == nil {
		go s.worker()
	}
}

// Ready reports whether the guard is set.
func (s *Server) Ready() bool { return s.guard.Load() != nil }

// Close stops the worker after the batch it runs and answers the steps
// still queued with 503 (not applied). Call it after the HTTP server's
// Shutdown; the store stays open.
func (s *Server) Close() {
	s.once.Do(func() {
		close(s.stop)
		if s.Ready() {
			<-s.done
		}
		for {
			select {
			case j := <-s.queue:
				s.answer(j, outcome{err: &APIError{Status: 503, Code: "shutting_down", Message: "the server is shutting down; the step was not applied"}})
			default:
				return
			}
		}
	})
}

// Handler returns the HTTP handler of the API.
func (s *Server) Handler() http.Handler { return s.mux }

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	v1 := func(pattern string, h func(w http.ResponseWriter, r *http.Request) (int, error)) {
		s.mux.Handle(pattern, s.wrap(pattern, true, h))
	}
	open := func(pattern string, h func(w http.ResponseWriter, r *http.Request) (int, error)) {
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
func (s *Server) wrap(route string, auth bool, h func(w http.ResponseWriter, r *http.Request) (int, error)) http.Handler {
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

// answerOf is the answer of a stored step.
func answerOf(st *Step) *AssessResponse {
	return &AssessResponse{Decision: st.Decision, Score: st.Score, Rationale: st.Rationale, MemoryVersion: st.MemoryVersion,
		Tokens: st.Tokens, LatencyMS: st.LatencyMS, Step: st.Step}
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
	if !s.Ready() {
		return 0, &APIError{Status: 503, Code: "loading", Message: "the model is loading"}
	}
	in := rollout.StepInput{UserPrompt: sess.UserPrompt, First: sess.StepCount == 0, Memory: sess.Memory,
		Previous: sess.LastAction, UserMessages: req.UserMessages, Action: req.Action}
	if req.Observation != nil {
		in.Observation = *req.Observation
	}
	j := &job{id: id, in: in, req: req, step: sess.StepCount, arrived: arrived,
		deadline: arrived.Add(s.cfg.deadline()), done: make(chan outcome, 1)}
	select {
	case s.queue <- j:
	default:
		s.metrics.notApplied("queue_full")
		w.Header().Set("Retry-After", "1")
		return 0, &APIError{Status: 429, Code: "queue_full", Message: fmt.Sprintf("%d steps are waiting (serve.queue_size); retry later", s.cfg.QueueSize)}
	}
	timer := time.NewTimer(time.Until(j.deadline))
	defer timer.Stop()
	var o outcome
	select {
	case o = <-j.done:
	case <-timer.C:
		o = s.abandon(j, "deadline")
	case <-r.Context().Done():
		o = s.abandon(j, "client_gone")
	}
	if o.err != nil {
		return 0, o.err
	}
	writeJSON(w, 200, o.resp)
	return 200, nil
}

// abandon gives up a job whose handler can wait no longer. A job still
// queued is dropped (never applied); one the worker has taken is waited
// for: the worker either applies it and answers, or, past its deadline,
// answers that it was not applied.
func (s *Server) abandon(j *job, why string) outcome {
	if j.state.CompareAndSwap(jobQueued, jobAbandoned) {
		s.metrics.notApplied("deadline")
		return outcome{err: deadlineError(why)}
	}
	return <-j.done
}

func deadlineError(why string) *APIError {
	msg := "the step was not decided within serve.deadline_s; it was not applied (send it again)"
	if why == "client_gone" {
		msg = "the client went away; the step was not applied"
	}
	return &APIError{Status: 503, Code: "deadline_exceeded", Message: msg}
}

// answer delivers a job's outcome (once; done is buffered).
func (s *Server) answer(j *job, o outcome) {
	select {
	case j.done <- o:
	default:
	}
}

// worker gathers queued steps into batches and runs them until Close.
func (s *Server) worker() {
	defer close(s.done)
	for {
		var first *job
		select {
		case first = <-s.queue:
		case <-s.stop:
			return
		}
		batch := s.gather(first)
		s.run(batch)
	}
}

// gather collects up to batch_size jobs: first, whatever is queued, and
// what arrives within max_wait_ms of first's being taken.
func (s *Server) gather(first *job) []*job {
	batch := []*job{first}
	timer := time.NewTimer(s.cfg.maxWait())
	defer timer.Stop()
	for len(batch) < s.cfg.BatchSize {
		select {
		case j := <-s.queue:
			batch = append(batch, j)
			continue
		default:
		}
		select {
		case j := <-s.queue:
			batch = append(batch, j)
		case <-timer.C:
			return batch
		case <-s.stop:
			return batch
		}
	}
	return batch
}

// run runs one batch: the steps still wanted go through the guard
// together; each is stored (one transaction for the batch) before its
// answer is sent.
func (s *Server) run(batch []*job) {
	now := s.now()
	var jobs []*job
	for _, j := range batch {
		if now.After(j.deadline) {
			if j.state.CompareAndSwap(jobQueued, jobAbandoned) {
				s.metrics.notApplied("deadline")
				s.answer(j, outcome{err: deadlineError("deadline")})
			}
			continue
		}
		if j.state.CompareAndSwap(jobQueued, jobTaken) {
			jobs = append(jobs, j)
		}
	}
	if len(jobs) == 0 {
		return
	}
	inputs := make([]rollout.StepInput, len(jobs))
	for i, j := range jobs {
		inputs[i] = j.in
	}
	s.batchNo++
	sampling := generate.Sampling{Greedy: true, Temperature: 1, TopP: 1}
	if !s.cfg.Greedy {
		sampling = generate.Sampling{Temperature: s.rollout.Temperature, TopK: s.rollout.TopK, TopP: s.rollout.TopP, Seed: s.cfg.Seed + s.batchNo*0x9e3779b97f4a7c15}
	}
	start := time.Now()
	turns, stats, err := s.guard.Load().Step(inputs, sampling)
	elapsed := time.Since(start)
	if err == nil && len(turns) != len(jobs) {
		err = fmt.Errorf("the guard returned %d steps for %d", len(turns), len(jobs))
	}
	if err != nil {
		s.log.Error("generation failed", "steps", len(jobs), "error", err.Error())
		for _, j := range jobs {
			s.metrics.notApplied("error")
			s.answer(j, outcome{err: &APIError{Status: 500, Code: "generation_failed", Message: "the guard's generation failed; the step was not applied"}})
		}
		return
	}
	s.metrics.batch(len(jobs), elapsed.Seconds(), stats.PromptTokens, stats.NewTokens, stats.MemoryFailures, stats.JudgeFailures)

	decided := s.now()
	var commits []Commit
	var committed []*job
	for i, j := range jobs {
		if decided.After(j.deadline) {
			s.metrics.notApplied("deadline")
			s.answer(j, outcome{err: deadlineError("deadline")})
			continue
		}
		commits = append(commits, Commit{ID: j.id, Step: s.record(j, &turns[i], decided)})
		committed = append(committed, j)
	}
	if len(commits) == 0 {
		return
	}
	errs, err := s.store.CommitSteps(commits)
	if err != nil {
		s.log.Error("commit failed", "steps", len(commits), "error", err.Error())
	}
	for i, j := range committed {
		switch {
		case err != nil:
			s.metrics.notApplied("error")
			s.answer(j, outcome{err: &APIError{Status: 500, Code: "store_failed", Message: "the step could not be stored; it was not applied"}})
		case errs[i] != nil:
			s.metrics.notApplied("error")
			s.answer(j, outcome{err: &APIError{Status: 409, Code: "session_changed", Message: "the session changed or was deleted meanwhile; the step was not applied"}})
		default:
			st := &commits[i].Step
			s.metrics.step(st.Decision)
			s.answer(j, outcome{resp: answerOf(st)})
		}
	}
	s.log.Info("batch", "steps", len(jobs), "stored", len(commits), "ms", elapsed.Milliseconds(),
		"prompt_tokens", stats.PromptTokens, "generated_tokens", stats.NewTokens)
}

// record is the stored step of a job's turn: the answer's decision is
// block when the judge rejects, or with serve.threshold when the score
// reaches it.
func (s *Server) record(j *job, t *rollout.Turn, decided time.Time) Step {
	block := t.Decision == prompt.DecisionReject
	if s.cfg.Threshold > 0 {
		block = t.Score >= s.cfg.Threshold
	}
	decision := DecisionAllow
	if block {
		decision = DecisionBlock
	}
	memParsed := t.Memory != nil && t.Memory.Parsed
	return Step{
		Step: j.step, Action: j.in.Action, Observation: j.req.Observation, UserMessages: nonNil(j.req.UserMessages),
		Memory: t.MemoryOut, MemoryVersion: j.step + 1, MemoryParsed: memParsed,
		Decision: decision, Judge: t.Decision, JudgeParsed: t.Judge.Parsed,
		Score: t.Score, ScoreExact: t.ScoreExact, Rationale: t.Rationale,
		Tokens: t.GuardTokens(), LatencyMS: decided.Sub(j.arrived).Milliseconds(), DecidedAt: decided.UTC(),
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
