package main

// The load test and the crash test of `mageguard serve` (make serve-load,
// make serve-crash): not part of `go test ./...` unless their environment
// variables are set. Both drive sessions through turns of the bundled eval
// split over loopback, each session's steps in order as an agent loop
// sends them, with the "step" index so that a retry is safe.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/serve"
)

// envInt reads a positive integer from the environment, or def.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// loadTurns returns n sessions' worth of steps: session i follows
// trajectory i of the bundled eval split (those with an action, in order,
// wrapping), its first `steps` turns, repeating its turns when it has fewer.
func loadTurns(t *testing.T, n, steps int) []*dataset.Trajectory {
	t.Helper()
	all, err := dataset.ReadAll(bundledEval)
	if err != nil {
		t.Fatal(err)
	}
	var pool []*dataset.Trajectory
	for _, tr := range all {
		if len(tr.Turns) > 0 {
			pool = append(pool, tr)
		}
	}
	out := make([]*dataset.Trajectory, n)
	for i := range out {
		src := pool[i%len(pool)]
		tr := *src
		tr.Turns = nil
		for k := 0; k < steps; k++ {
			tr.Turns = append(tr.Turns, src.Turns[k%len(src.Turns)])
		}
		out[i] = &tr
	}
	return out
}

// loadClient sends an agent's requests and tells transport failures
// (the server is gone) from answers.
type loadClient struct {
	token string
	http  *http.Client

	mu   sync.Mutex
	base string // the server's URL; a restarted server has another port
}

func (c *loadClient) setBase(base string) {
	c.mu.Lock()
	c.base = base
	c.mu.Unlock()
}

func (c *loadClient) url(path string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base + path
}

var errGone = errors.New("the server did not answer")

func (c *loadClient) do(method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.url(path), rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", errGone, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", errGone, err)
	}
	return resp.StatusCode, data, nil
}

// answered is one step's answer as an agent received it.
type answered struct {
	resp    serve.AssessResponse
	latency time.Duration
	retried bool // the answer came from a retry
}

// driveSession sends the session's steps from `from` on, one at a time.
// A 429 is retried after its Retry-After; when the server does not answer,
// gone is called: if it returns true (the server is back) the same step is
// sent again with its index, else the session stops.
func driveSession(c *loadClient, id string, tr *dataset.Trajectory, from int, got map[int]answered, gone func() bool, onAnswer func(int, answered)) error {
	retried := false
	for i := from; i < len(tr.Turns); {
		body := assessTurn(tr, i)
		body["step"] = i
		start := time.Now()
		code, data, err := c.do("POST", "/v1/sessions/"+id+"/assess", body)
		switch {
		case errors.Is(err, errGone):
			if !gone() {
				return nil
			}
			retried = true
			continue
		case err != nil:
			return err
		case code == 429:
			retried = true
			time.Sleep(time.Second) // the server's Retry-After
			continue
		case code == 409 && strings.Contains(string(data), `"session_blocked"`):
			// The answer to the previous step was a block: resume and go on,
			// as the unabridged eval does.
			if code, data, err := c.do("POST", "/v1/sessions/"+id+"/resume", nil); err != nil || code != 200 {
				if errors.Is(err, errGone) && gone() {
					continue
				}
				return fmt.Errorf("resume %s: %d %s %v", id, code, data, err)
			}
			continue
		case code != 200:
			return fmt.Errorf("session %s step %d: %d %s", id, i, code, data)
		}
		var a serve.AssessResponse
		if err := json.Unmarshal(data, &a); err != nil {
			return err
		}
		if a.Step != i {
			return fmt.Errorf("session %s: step %d answered as step %d", id, i, a.Step)
		}
		if _, dup := got[i]; dup {
			return fmt.Errorf("session %s: step %d answered twice", id, i)
		}
		got[i] = answered{resp: a, latency: time.Since(start), retried: retried}
		if onAnswer != nil {
			onAnswer(i, got[i])
		}
		retried = false
		i++
	}
	return nil
}

// checkStored checks a session as stored against the answers its agent
// received: every answered step is there with its answer, steps are
// 0..n-1 once each, and the session's state is its last step's.
func checkStored(c *loadClient, id string, got map[int]answered) (*serve.SessionView, error) {
	code, data, err := c.do("GET", "/v1/sessions/"+id, nil)
	if err != nil || code != 200 {
		return nil, fmt.Errorf("get %s: %d %v", id, code, err)
	}
	var v serve.SessionView
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	if len(v.Steps) != v.StepCount || v.MemoryVersion != v.StepCount {
		return nil, fmt.Errorf("session %s: %d steps stored, step_count %d, memory_version %d", id, len(v.Steps), v.StepCount, v.MemoryVersion)
	}
	for i, st := range v.Steps {
		if st.Step != i {
			return nil, fmt.Errorf("session %s: stored step %d has index %d", id, i, st.Step)
		}
	}
	if n := len(v.Steps); n > 0 {
		last := v.Steps[n-1]
		if v.Memory != last.Memory || v.LastAction == nil || v.LastAction.Name != last.Action.Name {
			return nil, fmt.Errorf("session %s: its state is not its last step's", id)
		}
	}
	for i, a := range got {
		if i >= len(v.Steps) {
			return nil, fmt.Errorf("session %s: answered step %d is not stored (%d steps)", id, i, len(v.Steps))
		}
		st := v.Steps[i]
		if st.Decision != a.resp.Decision || st.Score != a.resp.Score || st.MemoryVersion != a.resp.MemoryVersion || st.Tokens != a.resp.Tokens {
			return nil, fmt.Errorf("session %s step %d: stored %s %g v%d, answered %s %g v%d", id, i, st.Decision, st.Score, st.MemoryVersion, a.resp.Decision, a.resp.Score, a.resp.MemoryVersion)
		}
	}
	return &v, nil
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(float64(len(s)-1)*p + 0.5)
	return s[k]
}

// metricValue reads one sample of /metrics (0 when it is not there yet:
// a labelled counter appears with its first count).
func metricValue(t *testing.T, text, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` ([0-9.e+-]+)$`).FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// loadSettings are the guard settings of both tests: the tiny checkpoint
// with structured decoding and the budgets of configs/tiny.yaml.
var loadSettings = []string{"--set", tokSet, "--set", "rollout.structured=true", "--set", "rollout.max_memory_tokens=40",
	"--set", "rollout.max_judge_tokens=36", "--set", "rollout.max_observation_tokens=256"}

// TestServeLoad (make serve-load): MAGEGUARD_SERVE_LOAD_SESSIONS sessions
// (32) × MAGEGUARD_SERVE_LOAD_STEPS steps (8) at once on a served tiny
// checkpoint, after one session alone for comparison. No step may be lost
// or answered twice; it reports throughput, p50/p99 latency and the mean
// generation batch size, also into $MAGEGUARD_SERVE_LOAD (a JSON file).
func TestServeLoad(t *testing.T) {
	out := os.Getenv("MAGEGUARD_SERVE_LOAD")
	if out == "" {
		t.Skip("set MAGEGUARD_SERVE_LOAD=FILE (make serve-load)")
	}
	sessions := envInt(t, "MAGEGUARD_SERVE_LOAD_SESSIONS", 32)
	steps := envInt(t, "MAGEGUARD_SERVE_LOAD_STEPS", 8)
	ckpt := tinyCheckpoint(t)
	t.Setenv(tokenEnv, "load-test-token-0123456789")
	base := startServe(t, append([]string{"--state", t.TempDir(), "--model", ckpt,
		"--set", fmt.Sprintf("serve.batch_size=%d", sessions), "--set", "serve.max_wait_ms=20"}, loadSettings...)...)
	c := &loadClient{base: base, token: "load-test-token-0123456789", http: &http.Client{Timeout: 5 * time.Minute}}
	trajs := loadTurns(t, sessions, steps)

	type phase struct {
		Sessions, Steps     int
		Seconds             float64
		StepsPerSecond      float64
		P50MS, P99MS        float64
		MeanBatch           float64
		Batches             float64
		Blocks, Retried     int
		AssessAnswered200   float64
		GuardTokensPerSecod float64 `json:"GuardTokensPerSecond"`
	}
	runPhase := func(n int) phase {
		before := metricsText(t, c)
		ids := make([]string, n)
		for i := range ids {
			code, data, err := c.do("POST", "/v1/sessions", map[string]any{"user_prompt": trajs[i].UserPrompt})
			if err != nil || code != 201 {
				t.Fatalf("create: %d %s %v", code, data, err)
			}
			var r struct{ ID string }
			json.Unmarshal(data, &r)
			ids[i] = r.ID
		}
		got := make([]map[int]answered, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := time.Now()
		for i := range ids {
			got[i] = map[int]answered{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = driveSession(c, ids[i], trajs[i], 0, got[i], func() bool { return false }, nil)
			}()
		}
		wg.Wait()
		wall := time.Since(start)
		var lat []time.Duration
		p := phase{Sessions: n, Steps: n * steps, Seconds: wall.Seconds()}
		for i := range ids {
			if errs[i] != nil {
				t.Fatalf("session %d: %v", i, errs[i])
			}
			if len(got[i]) != steps {
				t.Fatalf("session %d: %d of %d steps answered", i, len(got[i]), steps)
			}
			v, err := checkStored(c, ids[i], got[i])
			if err != nil {
				t.Fatal(err)
			}
			if v.StepCount != steps {
				t.Fatalf("session %d: %d steps stored, %d answered", i, v.StepCount, steps)
			}
			for _, a := range got[i] {
				lat = append(lat, a.latency)
				if a.resp.Decision == serve.DecisionBlock {
					p.Blocks++
				}
				if a.retried {
					p.Retried++
				}
			}
		}
		after := metricsText(t, c)
		diff := func(name string) float64 { return metricValue(t, after, name) - metricValue(t, before, name) }
		p.Batches = diff("mageguard_batch_steps_count")
		p.MeanBatch = diff("mageguard_batch_steps_sum") / p.Batches
		p.AssessAnswered200 = diff(`mageguard_http_requests_total{route="POST /v1/sessions/{id}/assess",code="200"}`)
		tokens := diff(`mageguard_tokens_total{kind="prompt"}`) + diff(`mageguard_tokens_total{kind="generated"}`)
		p.StepsPerSecond = float64(p.Steps) / wall.Seconds()
		p.GuardTokensPerSecod = tokens / wall.Seconds()
		p.P50MS = float64(percentile(lat, 0.5).Microseconds()) / 1000
		p.P99MS = float64(percentile(lat, 0.99).Microseconds()) / 1000
		// Every step was answered 200 exactly once: no request lost, none
		// answered twice (a retry of an answered step would have shown here).
		if int(p.AssessAnswered200) != p.Steps || p.Retried != 0 {
			t.Errorf("%d assess answers for %d steps (%d retried)", int(p.AssessAnswered200), p.Steps, p.Retried)
		}
		return p
	}
	single := runPhase(1)
	many := runPhase(sessions)
	report := map[string]any{
		"command": "make serve-load", "model": "tiny random Qwen3 (hidden 16, 1 layer, Qwen3 vocabulary), structured decoding, 40/36 new tokens",
		"serve":  fmt.Sprintf("batch_size %d, max_wait_ms 20, greedy, loopback, pure-Go backend", sessions),
		"single": single, "concurrent": many,
	}
	data, _ := json.MarshalIndent(report, "", "  ")
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []phase{single, many} {
		t.Logf("%d sessions × %d steps: %d steps in %.1f s = %.2f steps/s (%.0f guard tokens/s), latency p50 %.0f ms p99 %.0f ms, %d batches of %.1f steps on average, %d blocks",
			p.Sessions, steps, p.Steps, p.Seconds, p.StepsPerSecond, p.GuardTokensPerSecod, p.P50MS, p.P99MS, int(p.Batches), p.MeanBatch, p.Blocks)
	}
	if many.MeanBatch < 2 {
		t.Errorf("mean batch %.2f: concurrent steps were not batched", many.MeanBatch)
	}
}

func metricsText(t *testing.T, c *loadClient) string {
	t.Helper()
	code, data, err := c.do("GET", "/metrics", nil)
	if err != nil || code != 200 {
		t.Fatalf("metrics: %d %v", code, err)
	}
	return string(data)
}

// servedProcess is `mageguard serve` run as its own process (so that it
// can be killed with SIGKILL).
type servedProcess struct {
	cmd    *exec.Cmd
	log    *syncBuffer
	base   string
	exited chan struct{} // closed when the process has exited
}

func startProcess(t *testing.T, bin string, args ...string) *servedProcess {
	t.Helper()
	p := &servedProcess{log: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	pollUntil(t, 2*time.Minute, "serve to listen and load", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("serve exited:\n%s", p.log.String())
		default:
		}
		if p.base == "" {
			if m := listening.FindStringSubmatch(p.log.String()); m != nil {
				p.base = m[1]
			}
			return false
		}
		resp, err := http.Get(p.base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return p
}

// TestServeCrash (make serve-crash): sessions run their steps against a
// served checkpoint; once MAGEGUARD_SERVE_CRASH_AFTER steps (40) are
// answered the server is killed with SIGKILL in the middle of the load,
// restarted on the same --state, and every answered step must be stored
// with its answer, no session half-updated; the agents then retry their
// pending step (by index) and finish, and no step is stored twice.
func TestServeCrash(t *testing.T) {
	if os.Getenv("MAGEGUARD_SERVE_CRASH") == "" {
		t.Skip("set MAGEGUARD_SERVE_CRASH=1 (make serve-crash)")
	}
	sessions := envInt(t, "MAGEGUARD_SERVE_CRASH_SESSIONS", 16)
	steps := envInt(t, "MAGEGUARD_SERVE_CRASH_STEPS", 8)
	crashAfter := envInt(t, "MAGEGUARD_SERVE_CRASH_AFTER", 40)
	dir := t.TempDir()
	bin := filepath.Join(dir, "mageguard")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	ckpt := tinyCheckpoint(t)
	tokenFile := filepath.Join(dir, "token")
	const token = "crash-test-token-0123456789"
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	args := append([]string{"--state", state, "--model", ckpt, "--token-file", tokenFile,
		"--set", "serve.batch_size=16", "--set", "serve.max_wait_ms=20"}, loadSettings...)

	first := startProcess(t, bin, args...)
	c := &loadClient{base: first.base, token: token, http: &http.Client{Timeout: 5 * time.Minute}}
	trajs := loadTurns(t, sessions, steps)
	ids := make([]string, sessions)
	for i := range ids {
		code, data, err := c.do("POST", "/v1/sessions", map[string]any{"user_prompt": trajs[i].UserPrompt})
		if err != nil || code != 201 {
			t.Fatalf("create: %d %s %v", code, data, err)
		}
		var r struct{ ID string }
		json.Unmarshal(data, &r)
		ids[i] = r.ID
	}

	// The agents run until the server goes; then they wait for it to be back.
	var mu sync.Mutex
	back := sync.NewCond(&mu)
	restarted := false
	gone := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for !restarted {
			back.Wait()
		}
		return true
	}
	got := make([]map[int]answered, sessions)  // each agent's own, read once it is done
	seen := make([]map[int]answered, sessions) // a copy, for the check right after the restart
	var seenMu sync.Mutex
	var nAnswered atomic.Int64
	errs := make([]error, sessions)
	var wg sync.WaitGroup
	for i := range ids {
		got[i], seen[i] = map[int]answered{}, map[int]answered{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = driveSession(c, ids[i], trajs[i], 0, got[i], gone, func(step int, a answered) {
				seenMu.Lock()
				seen[i][step] = a
				seenMu.Unlock()
				nAnswered.Add(1)
			})
		}()
	}
	pollUntil(t, 10*time.Minute, fmt.Sprintf("%d answered steps", crashAfter), func() bool { return nAnswered.Load() >= int64(crashAfter) })
	if err := first.cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown, no flush
		t.Fatal(err)
	}
	answeredAtCrash := nAnswered.Load()
	<-first.exited

	second := startProcess(t, bin, args...)
	c.setBase(second.base)
	// Before the agents go on: every step answered before the kill is
	// stored with its answer, and every session is whole.
	seenMu.Lock()
	answeredBefore, storedBefore := 0, 0
	for i, id := range ids {
		v, err := checkStored(c, id, seen[i])
		if err != nil {
			t.Fatalf("right after the restart: %v", err)
		}
		answeredBefore += len(seen[i])
		storedBefore += v.StepCount
	}
	seenMu.Unlock()
	mu.Lock()
	restarted = true
	back.Broadcast()
	mu.Unlock()
	wg.Wait()
	defer func() { second.cmd.Process.Kill(); <-second.exited }()

	stored, retried := 0, 0
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("session %d: %v", i, errs[i])
		}
		v, err := checkStored(c, id, got[i])
		if err != nil {
			t.Fatal(err)
		}
		if v.StepCount != steps || len(got[i]) != steps {
			t.Fatalf("session %d: %d steps stored, %d answered, want %d", i, v.StepCount, len(got[i]), steps)
		}
		stored += v.StepCount
		for _, a := range got[i] {
			if a.retried {
				retried++
			}
		}
	}
	t.Logf("killed with SIGKILL after %d answered steps (%d sessions × %d steps); right after the restart all %d steps answered before the kill were stored with their answers (%d stored: %d committed whose answer the kill cut off), no session half-updated; the agents then retried %d pending steps by index and finished: %d steps stored, each once, each with the answer its agent got",
		answeredAtCrash, sessions, steps, answeredBefore, storedBefore, storedBefore-answeredBefore, retried, stored)
	if !strings.Contains(second.log.String(), fmt.Sprintf("%d sessions)", sessions)) {
		t.Errorf("the restarted server did not find the %d sessions:\n%s", sessions, second.log.String())
	}
}
