package main

import (
	"encoding/json"
	"errors"
	"fmt"
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
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/servetest"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/scripts/internal/check"
	"github.com/mageguard/mageguard/serve"
)

// bundledEval is the bundled eval split, whose turns the sessions send.
const bundledEval = "data/agentdojo-mini/eval.jsonl"

// loadSettings are the guard settings of every check: the tiny checkpoint
// with structured decoding and the budgets of configs/tiny.yaml.
var loadSettings = []string{"--set", "rollout.structured=true", "--set", "rollout.max_memory_tokens=40",
	"--set", "rollout.max_judge_tokens=36", "--set", "rollout.max_observation_tokens=256"}

// tinyCheckpoint writes a random Qwen3 with the real vocabulary but a
// 16-wide single layer (2.4M parameters, nearly all of them the embedding),
// so that a decode step is as cheap as the vocabulary allows.
func tinyCheckpoint(t *check.T) string {
	b, err := backend.New(backend.Default())
	if err != nil {
		t.Fatal(err)
	}
	cfg := model.DefaultTinyConfig()
	cfg.HiddenSize, cfg.IntermediateSize, cfg.NumHiddenLayers = 16, 48, 1
	cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.HeadDim = 2, 1, 8
	m, err := model.New(b, &cfg, 1, dtypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := m.Save(dir, model.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	return dir
}

var listening = regexp.MustCompile(`serve: listening on (https?://[^ ]+)`)

// tokenFile writes token to a file for serve's --token-file.
func tokenFile(t *check.T, token string) string {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadTurns returns n sessions' worth of steps: session i follows
// trajectory i of the bundled eval split (those with an action, in order,
// wrapping), its first `steps` turns, repeating its turns when it has fewer.
func loadTurns(t *check.T, n, steps int) []*dataset.Trajectory {
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

// loadClient sends an agent's requests to the server's current URL: a
// restarted server has another port. errors.Is(err, servetest.ErrNoAnswer)
// tells a transport failure (the server is gone) from an answer.
type loadClient struct {
	mu  sync.Mutex
	api servetest.Client
}

// newLoadClient is a client of the server at base with token, waiting up
// to 5 minutes for an answer.
func newLoadClient(base, token string) *loadClient {
	return &loadClient{api: servetest.Client{Base: base, Token: token, HTTP: &http.Client{Timeout: 5 * time.Minute}}}
}

func (c *loadClient) setBase(base string) {
	c.mu.Lock()
	c.api.Base = base
	c.mu.Unlock()
}

func (c *loadClient) do(method, path string, body any) (int, []byte, error) {
	c.mu.Lock()
	api := c.api
	c.mu.Unlock()
	return api.Do(method, path, body)
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
		body := servetest.AssessTurn(tr, i)
		body["step"] = i
		start := time.Now()
		code, data, err := c.do("POST", "/v1/sessions/"+id+"/assess", body)
		switch {
		case errors.Is(err, servetest.ErrNoAnswer):
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
				if errors.Is(err, servetest.ErrNoAnswer) && gone() {
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
func metricValue(t *check.T, text, name string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` ([0-9.e+-]+)$`).FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func metricsText(t *check.T, c *loadClient) string {
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
	log    *servetest.SyncBuffer
	base   string
	exited chan struct{} // closed when the process has exited
}

func startProcess(t *check.T, bin string, args ...string) *servedProcess {
	p := &servedProcess{log: &servetest.SyncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.exited })
	servetest.PollUntil(t, 2*time.Minute, "serve to listen and load", func() bool {
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
