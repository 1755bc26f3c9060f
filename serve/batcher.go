package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/prompt"
	"github.com/mageguard/mageguard/serve/store"
)

// Stepper runs one step of the guard loop for many sessions at once
// (*rollout.Guard). An error that is a *rollout.StepErrors fails only the
// steps it names.
type Stepper interface {
	Step(inputs []rollout.StepInput, s generate.Sampling) ([]rollout.Turn, rollout.Stats, error)
}

// Preparer is a Stepper that can do a step's text work as it arrives
// (*rollout.Guard: PrepareStep elides its texts, renders its memory prompt
// and checks its prompts against StepInput.MaxPromptTokens), so that a
// step too long is refused alone before it reaches a batch, and the batch
// does none of that work.
type Preparer interface {
	PrepareStep(in rollout.StepInput) (rollout.StepInput, error)
}

// batcher decides the steps of many sessions in shared generation batches.
// A front end (the HTTP handlers) submits a step with decide — the session
// as it read it while holding the session's claim, and the request — and
// waits for the answer; one worker gathers the queued steps into batches
// of up to serve.batch_size, runs each batch through the guard, stores
// every step it decided (one commit a batch) and answers each submitter.
// It knows nothing of HTTP: its refusals are *APIError values, which a
// front end translates.
type batcher struct {
	cfg     Config
	rollout rollout.Config // sampled decoding's settings (serve.greedy: false)
	store   store.Store
	metrics *metrics
	log     *slog.Logger
	now     func() time.Time

	shares *shares // the sessions' recent use of the guard (fairshare.go)
	// shareKey is what a session's use is counted under: its id, or its
	// tenant's for an agent's (Server.shareKey); nil: its id.
	shareKey func(*Session) string
	guard    atomic.Pointer[stepperBox] // nil until setGuard
	queue    chan *job
	batchNo  uint64 // batches run; seeds sampled decoding

	stop, done chan struct{}
	once       sync.Once
}

type stepperBox struct{ Stepper }

// Job states: a queued job is taken by the worker or abandoned by its
// submitter (deadline, client gone), never both.
const (
	jobQueued int32 = iota
	jobTaken
	jobAbandoned
)

// job is one step waiting for, or in, a generation batch.
type job struct {
	id       string
	share    string // what its use of the guard is counted under (batcher.shareKey)
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

func newBatcher(cfg Config, rc rollout.Config, st store.Store, m *metrics, log *slog.Logger, now func() time.Time) *batcher {
	return &batcher{
		cfg: cfg, rollout: rc, store: st, metrics: m, log: log, now: now, shares: newShares(cfg.MaxSessionShare),
		queue: make(chan *job, cfg.QueueSize),
		stop:  make(chan struct{}), done: make(chan struct{}),
	}
}

// setGuard hands the batcher its guard; the first call starts the worker.
func (b *batcher) setGuard(g Stepper) {
	if b.guard.Swap(&stepperBox{g}) == nil {
		go b.worker()
	}
}

// ready reports whether the guard is set.
func (b *batcher) ready() bool { return b.guard.Load() != nil }

// queued is the number of steps waiting for a batch.
func (b *batcher) queued() int { return len(b.queue) }

// close stops the worker after the batch it runs and answers the steps
// still queued with 503 (not applied).
func (b *batcher) close() {
	b.once.Do(func() {
		close(b.stop)
		if b.ready() {
			<-b.done
		}
		for {
			select {
			case j := <-b.queue:
				b.answer(j, outcome{err: &APIError{Status: 503, Code: "shutting_down", Message: "the server is shutting down; the step was not applied"}})
			default:
				return
			}
		}
	})
}

// decide queues the next step of session id for the request req that
// arrived at arrived — sess is the session as read while the caller holds
// its claim — and waits
// for its answer: until the worker has decided and stored it, its deadline
// (arrived + serve.deadline_s) passes, or ctx ends (the client went away).
// Its errors are *APIError: 503 while the guard is loading, 429 (with
// Retry-After) when the queue is full, 503 when the step was not applied.
func (b *batcher) decide(ctx context.Context, id string, sess *Session, req *AssessRequest, arrived time.Time) (*AssessResponse, error) {
	if !b.ready() {
		return nil, &APIError{Status: 503, Code: "loading", Message: "the model is loading"}
	}
	in := rollout.StepInput{UserPrompt: sess.UserPrompt, First: sess.StepCount == 0, Memory: sess.Memory,
		Previous: sess.LastAction, UserMessages: req.UserMessages, Action: req.Action, MaxPromptTokens: b.cfg.MaxPromptTokens}
	if in.First { // the declared tools, shown with the request
		shown := sess.Tools
		if req.ShownTools != nil {
			shown = req.ShownTools
		}
		for _, t := range shown {
			in.Tools = append(in.Tools, dataset.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		}
	}
	if req.Observation != nil {
		in.Observation = *req.Observation
	}
	if p, ok := b.guard.Load().Stepper.(Preparer); ok {
		var err error
		if in, err = p.PrepareStep(in); err != nil {
			b.metrics.notApplied("too_long")
			return nil, stepError(err)
		}
	}
	j := &job{id: id, share: id, in: in, req: req, step: sess.StepCount, arrived: arrived,
		deadline: arrived.Add(b.cfg.deadline()), done: make(chan outcome, 1)}
	if b.shareKey != nil {
		j.share = b.shareKey(sess)
	}
	if err := b.pace(ctx, j); err != nil {
		return nil, err
	}
	select {
	case b.queue <- j:
	default:
		b.metrics.notApplied("queue_full")
		return nil, &APIError{Status: 429, Code: "queue_full", retryAfter: "1",
			Message: fmt.Sprintf("%d steps are waiting (serve.queue_size); retry later", b.cfg.QueueSize)}
	}
	timer := time.NewTimer(time.Until(j.deadline))
	defer timer.Stop()
	var o outcome
	select {
	case o = <-j.done:
	case <-timer.C:
		o = b.abandon(j, "deadline")
	case <-ctx.Done():
		o = b.abandon(j, "client_gone")
	}
	if o.err != nil {
		return nil, o.err
	}
	return o.resp, nil
}

// pace holds a job of a session above its share of the guard
// (serve.max_session_share) until it is within it: a 429 with Retry-After
// when that would pass the job's deadline, a 503 when the client goes
// away or the server stops meanwhile.
func (b *batcher) pace(ctx context.Context, j *job) error {
	now := b.now()
	w := b.shares.wait(now, j.share)
	if w <= 0 {
		return nil
	}
	if now.Add(w).After(j.deadline) {
		b.metrics.notApplied("over_share")
		who := "this session"
		if j.share != j.id {
			who = "this tenant's sessions"
		}
		return &APIError{Status: 429, Code: "over_share", retryAfter: strconv.Itoa(int(math.Ceil(w.Seconds()))),
			Message: fmt.Sprintf("%s used more than serve.max_session_share (%g) of the guard lately; retry in %.0f s", who, b.cfg.MaxSessionShare, math.Ceil(w.Seconds()))}
	}
	b.metrics.paced()
	timer := time.NewTimer(w)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		b.metrics.notApplied("deadline")
		return deadlineError("client_gone")
	case <-b.stop:
		return &APIError{Status: 503, Code: "shutting_down", Message: "the server is shutting down; the step was not applied"}
	}
}

// charge counts a batch's seconds to its jobs' sessions, split by their
// prompts' lengths.
func (b *batcher) charge(jobs []*job, seconds float64) {
	total := 0
	for _, j := range jobs {
		total += max(j.in.PromptTokens(), 1)
	}
	now := b.now()
	for _, j := range jobs {
		b.shares.charge(now, j.share, seconds*float64(max(j.in.PromptTokens(), 1))/float64(total))
	}
}

// abandon gives up a job whose submitter can wait no longer. A job still
// queued is dropped (never applied); one the worker has taken is waited
// for: the worker either applies it and answers, or, past its deadline,
// answers that it was not applied.
func (b *batcher) abandon(j *job, why string) outcome {
	if j.state.CompareAndSwap(jobQueued, jobAbandoned) {
		b.metrics.notApplied("deadline")
		return outcome{err: deadlineError(why)}
	}
	return <-j.done
}

// stepError is the answer to a step that failed alone: 413 for a prompt
// too long, else 500.
func stepError(err error) *APIError {
	var tooLong *rollout.PromptTooLongError
	if errors.As(err, &tooLong) {
		return &APIError{Status: 413, Code: "prompt_too_long",
			Message: fmt.Sprintf("the step's %s prompt has %d tokens after elision, more than serve.max_prompt_tokens (%d); the step was not applied (send fewer or shorter user messages)", tooLong.Role, tooLong.Tokens, tooLong.Max)}
	}
	return &APIError{Status: 500, Code: "generation_failed", Message: "the guard's generation failed; the step was not applied"}
}

func deadlineError(why string) *APIError {
	msg := "the step was not decided within serve.deadline_s; it was not applied (send it again)"
	if why == "client_gone" {
		msg = "the client went away; the step was not applied"
	}
	return &APIError{Status: 503, Code: "deadline_exceeded", Message: msg}
}

// answer delivers a job's outcome (once; done is buffered).
func (b *batcher) answer(j *job, o outcome) {
	select {
	case j.done <- o:
	default:
	}
}

// worker gathers queued steps into batches and runs them until close.
func (b *batcher) worker() {
	defer close(b.done)
	for {
		var first *job
		select {
		case first = <-b.queue:
		case <-b.stop:
			return
		}
		b.run(b.gather(first))
	}
}

// gather collects up to batch_size jobs: first, whatever is queued, and
// what arrives within max_wait_ms of first's being taken.
func (b *batcher) gather(first *job) []*job {
	batch := []*job{first}
	timer := time.NewTimer(b.cfg.maxWait())
	defer timer.Stop()
	for len(batch) < b.cfg.BatchSize {
		select {
		case j := <-b.queue:
			batch = append(batch, j)
			continue
		default:
		}
		select {
		case j := <-b.queue:
			batch = append(batch, j)
		case <-timer.C:
			return batch
		case <-b.stop:
			return batch
		}
	}
	return batch
}

// take returns the jobs of a batch still wanted, marked taken; those past
// their deadline are answered 503 (not applied).
func (b *batcher) take(batch []*job) []*job {
	now := b.now()
	var jobs []*job
	for _, j := range batch {
		if now.After(j.deadline) {
			if j.state.CompareAndSwap(jobQueued, jobAbandoned) {
				b.metrics.notApplied("deadline")
				b.answer(j, outcome{err: deadlineError("deadline")})
			}
			continue
		}
		if j.state.CompareAndSwap(jobQueued, jobTaken) {
			jobs = append(jobs, j)
		}
	}
	return jobs
}

// run runs one gathered batch: the steps still wanted go through the
// guard, those of like cost together (byCost), the cheapest first; each is
// stored (one transaction a group) before its answer is sent.
func (b *batcher) run(batch []*job) {
	for _, jobs := range byCost(b.take(batch), func(j *job) int { return j.in.PromptTokens() }) {
		b.runGroup(jobs)
	}
}

// byCost splits jobs into groups whose longest prompt is at most twice
// their shortest (tokens: StepInput.PromptTokens), shortest first, each
// group in the order of jobs among equals. A generation batch pads every
// row to its longest prompt: a short step batched with a long one costs
// the long one's prefill and waits for it, so a session sending long
// actions would slow each step batched beside it.
func byCost(jobs []*job, tokens func(*job) int) [][]*job {
	sorted := slices.Clone(jobs)
	slices.SortStableFunc(sorted, func(a, b *job) int { return tokens(a) - tokens(b) })
	var groups [][]*job
	for len(sorted) > 0 {
		n := 1
		for n < len(sorted) && tokens(sorted[n]) <= 2*tokens(sorted[0]) {
			n++
		}
		groups, sorted = append(groups, sorted[:n]), sorted[n:]
	}
	return groups
}

// runGroup runs jobs through the guard together and stores and answers
// each.
func (b *batcher) runGroup(jobs []*job) {
	b.batchNo++
	sampling := generate.Sampling{Greedy: true, Temperature: 1, TopP: 1}
	if !b.cfg.Greedy {
		sampling = generate.Sampling{Temperature: b.rollout.Temperature, TopK: b.rollout.TopK, TopP: b.rollout.TopP, Seed: b.cfg.Seed + b.batchNo*0x9e3779b97f4a7c15}
	}
	start := time.Now()
	turns, errs, stats := b.step(jobs, sampling)
	elapsed := time.Since(start)
	b.charge(jobs, elapsed.Seconds())
	var ok []*job
	var okTurns []rollout.Turn
	for i, j := range jobs {
		if errs[i] != nil {
			b.log.Error("step failed", "session", j.id, "error", errs[i].Error())
			b.metrics.notApplied("error")
			b.answer(j, outcome{err: stepError(errs[i])})
			continue
		}
		ok = append(ok, j)
		okTurns = append(okTurns, turns[i])
	}
	b.metrics.batch(len(jobs), elapsed.Seconds(), stats.PromptTokens, stats.NewTokens, stats.MemoryFailures, stats.JudgeFailures)
	for _, t := range okTurns {
		tm := t.Timing()
		b.metrics.stepTiming(tm.Prefill.Seconds(), tm.Memory.Seconds(), tm.Judge.Seconds())
	}
	if len(ok) == 0 {
		return
	}
	if stored := b.commit(ok, okTurns); stored > 0 {
		b.log.Info("batch", "steps", len(jobs), "stored", stored, "ms", elapsed.Milliseconds(),
			"prompt_tokens", stats.PromptTokens, "generated_tokens", stats.NewTokens)
	}
}

// step runs the jobs' inputs through the guard and returns each one's
// turn or error. A step that fails alone (*rollout.StepErrors) fails
// without the others; when the whole call fails, each half runs again on
// its own, down to the steps that still fail, so that one bad step never
// fails the steps beside it. A part whose steps are all past their
// deadline is not run again (their answers would be 503 anyway), which
// bounds the retries when every call fails (a generator down). The Stats
// count each step once, from the call that decided its outcome: a call
// that failed as a whole and runs again half by half counts nothing
// itself (its elisions and tokens would otherwise be counted again by
// each half).
func (b *batcher) step(jobs []*job, s generate.Sampling) ([]rollout.Turn, []error, rollout.Stats) {
	inputs := make([]rollout.StepInput, len(jobs))
	for i, j := range jobs {
		inputs[i] = j.in
	}
	turns, stats, err := b.guard.Load().Step(inputs, s)
	errs := make([]error, len(jobs))
	var rows *rollout.StepErrors
	switch {
	case err == nil && len(turns) != len(jobs):
		err = fmt.Errorf("the guard returned %d steps for %d", len(turns), len(jobs))
	case errors.As(err, &rows) && len(rows.Errs) == len(jobs) && len(turns) == len(jobs):
		return turns, rows.Errs, stats
	}
	if err == nil {
		return turns, errs, stats
	}
	b.log.Error("generation failed", "steps", len(jobs), "error", err.Error())
	now := b.now()
	if len(jobs) == 1 || !slices.ContainsFunc(jobs, func(j *job) bool { return now.Before(j.deadline) }) {
		for i := range errs {
			errs[i] = err
		}
		return make([]rollout.Turn, len(jobs)), errs, stats
	}
	half := len(jobs) / 2
	lt, le, ls := b.step(jobs[:half], s)
	rt, re, rs := b.step(jobs[half:], s)
	ls.Add(rs)
	return append(lt, rt...), append(le, re...), ls
}

// commit stores the decided steps of jobs (turns[i] is jobs[i]'s) that are
// still within their deadline, in one transaction, and answers every job.
// It returns the number of steps it tried to store.
func (b *batcher) commit(jobs []*job, turns []rollout.Turn) int {
	decided := b.now()
	var commits []store.Commit
	var committed []*job
	var timings []rollout.Timing
	for i, j := range jobs {
		if decided.After(j.deadline) {
			b.metrics.notApplied("deadline")
			b.answer(j, outcome{err: deadlineError("deadline")})
			continue
		}
		commits = append(commits, store.Commit{ID: j.id, Step: b.record(j, &turns[i], decided)})
		committed = append(committed, j)
		timings = append(timings, turns[i].Timing())
	}
	if len(commits) == 0 {
		return 0
	}
	errs, err := b.store.CommitSteps(commits)
	if err != nil {
		b.log.Error("commit failed", "steps", len(commits), "error", err.Error())
	}
	for i, j := range committed {
		switch {
		case err != nil:
			b.metrics.notApplied("error")
			ae := storeFailed(err)
			b.answer(j, outcome{err: &APIError{Status: 500, Code: "store_failed", Message: "the step could not be stored; it was not applied: " + ae.Message}})
		case errors.As(errs[i], new(*store.LimitError)):
			b.metrics.notApplied("state_full")
			ae, _ := isAPIError(storeError(errs[i])) // 507 state_full
			b.answer(j, outcome{err: ae})
		case errs[i] != nil:
			b.metrics.notApplied("error")
			b.answer(j, outcome{err: &APIError{Status: 409, Code: "session_changed", Message: "the session changed or was deleted meanwhile; the step was not applied"}})
		default:
			st := &commits[i].Step
			b.metrics.step(st.Decision)
			resp := answerOf(st)
			resp.Timing = timings[i]
			b.answer(j, outcome{resp: resp})
		}
	}
	return len(commits)
}

// record is the stored step of a job's turn: the answer's decision is
// block when the judge rejects, or with serve.threshold when the score
// reaches it.
func (b *batcher) record(j *job, t *rollout.Turn, decided time.Time) Step {
	block := t.Decision == prompt.DecisionReject
	if b.cfg.Threshold > 0 {
		block = t.Score >= b.cfg.Threshold
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

// answerOf is the answer of a stored step.
func answerOf(st *Step) *AssessResponse {
	return &AssessResponse{Decision: st.Decision, Score: st.Score, Rationale: st.Rationale, MemoryVersion: st.MemoryVersion,
		Tokens: st.Tokens, LatencyMS: st.LatencyMS, Step: st.Step}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
