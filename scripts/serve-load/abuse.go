package main

import (
	"encoding/json"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mageguard/mageguard/scripts/internal/check"
)

// hostileBody is the n-th step of the hostile session: long actions in
// turn — an array of 30,000 numbers (60 KB), a 30 KB string argument, and
// the 60 KB array with a 30 KB user message — each with the previous
// step's observation.
func hostileBody(n int) map[string]any {
	var args string
	switch n % 3 {
	case 0, 2:
		args = `{"ids": [` + strings.Repeat("1234,", 12_000) + `1]}`
	case 1:
		args = `{"to": "mallory@evil.com", "body": "` + strings.Repeat("send all money now ", 1_600) + `"}`
	}
	body := map[string]any{"action": map[string]any{"name": "send_email", "arguments": json.RawMessage(args)}, "step": n}
	if n > 0 {
		body["observation"] = "done"
	}
	if n%3 == 2 {
		body["user_messages"] = []string{strings.Repeat("and forward everything ", 1_300)}
	}
	return body
}

// serveAbuse (make serve-abuse): a normal session driven through turns
// of the bundled eval split alone, then again beside a hostile session that
// sends long actions as fast as it is answered. The normal session must
// keep its decisions and scores, and its latency (median and mean) must
// stay within 2× of running alone; every hostile step must be answered (elided, not
// failed). Figures go to out (a JSON file).
func serveAbuse(t *check.T, bin, out string, steps int) {
	ckpt := tinyCheckpoint(t)
	const token = "abuse-test-token-0123456789"
	p := startProcess(t, bin, append([]string{"--state", t.TempDir(), "--model", ckpt, "--token-file", tokenFile(t, token),
		"--set", "serve.batch_size=8", "--set", "serve.max_wait_ms=20"}, loadSettings...)...)
	c := newLoadClient(p.base, token)
	tr := loadTurns(t, 1, steps)[0]

	type phase struct {
		Steps        int
		Decisions    []string
		Scores       []float64
		LatenciesMS  []float64
		P50MS        float64
		MeanMS       float64
		HostileSteps int64 `json:",omitempty"`
		HostileCodes map[int]int
	}
	create := func(prompt string) string {
		code, data, err := c.do("POST", "/v1/sessions", map[string]any{"user_prompt": prompt})
		if err != nil || code != 201 {
			t.Fatalf("create: %d %s %v", code, data, err)
		}
		var r struct{ ID string }
		json.Unmarshal(data, &r)
		return r.ID
	}
	normal := func(stop func()) phase {
		id := create(tr.UserPrompt)
		got := map[int]answered{}
		if err := driveSession(c, id, tr, 0, got, func() bool { return false }, nil); err != nil {
			t.Fatal(err)
		}
		if stop != nil {
			stop()
		}
		p := phase{Steps: steps, HostileCodes: map[int]int{}}
		var lat []time.Duration
		for i := 0; i < steps; i++ {
			a := got[i]
			p.Decisions = append(p.Decisions, a.resp.Decision)
			p.Scores = append(p.Scores, a.resp.Score)
			p.LatenciesMS = append(p.LatenciesMS, float64(a.latency.Microseconds())/1000)
			lat = append(lat, a.latency)
			p.MeanMS += float64(a.latency.Microseconds()) / 1000 / float64(steps)
		}
		p.P50MS = float64(percentile(lat, 0.5).Microseconds()) / 1000
		return p
	}

	alone := normal(nil)
	m0 := metricsText(t, c)

	// The hostile session runs until the normal one is done.
	hostile := create("Summarize my inbox")
	var done atomic.Bool
	var hostileSteps atomic.Int64
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; !done.Load(); {
			code, data, err := c.do("POST", "/v1/sessions/"+hostile+"/assess", hostileBody(n))
			if err != nil {
				t.Errorf("hostile step %d: %v", n, err)
				return
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
			switch {
			case code == 200:
				hostileSteps.Add(1)
				n++
			case code == 409 && strings.Contains(string(data), `"session_blocked"`):
				c.do("POST", "/v1/sessions/"+hostile+"/resume", nil)
			default:
				t.Errorf("hostile step %d: %d %s", n, code, data)
				return
			}
		}
	}()
	for hostileSteps.Load() == 0 && !t.Failed() { // the hostile session is running
		time.Sleep(10 * time.Millisecond)
	}
	beside := normal(func() { done.Store(true) })
	wg.Wait()
	beside.HostileSteps, beside.HostileCodes = hostileSteps.Load(), codes
	m1 := metricsText(t, c)
	guard := map[string]map[string]float64{"alone": {}, "beside_hostile": {}}
	for _, name := range []string{"mageguard_batch_seconds_sum", "mageguard_batch_seconds_count", "mageguard_batch_steps_sum",
		`mageguard_tokens_total{kind="prompt"}`, "mageguard_steps_paced_total"} {
		guard["alone"][name] = metricValue(t, m0, name)
		guard["beside_hostile"][name] = metricValue(t, m1, name) - metricValue(t, m0, name)
	}

	report := map[string]any{
		"command": "make serve-abuse",
		"model":   "tiny random Qwen3 (hidden 16, 1 layer, Qwen3 vocabulary), structured decoding, 40/36 new tokens",
		"serve":   "batch_size 8, max_wait_ms 20, greedy, loopback, pure-Go backend",
		"hostile": "one session: 60 KB actions (30,000 numbers), 30 KB string arguments, 30 KB user messages, sent as fast as answered",
		"alone":   alone, "beside_hostile": beside, "guard": guard,
		"latency_ratio_p50": beside.P50MS / alone.P50MS, "latency_ratio_mean": beside.MeanMS / alone.MeanMS,
	}
	data, _ := json.MarshalIndent(report, "", "  ")
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d steps alone: p50 %.0f ms, mean %.0f ms; beside the hostile session (%d hostile steps answered, codes %v, %v held back): p50 %.0f ms, mean %.0f ms (%.2f×, %.2f×); guard seconds alone %.1f, beside %.1f",
		steps, alone.P50MS, alone.MeanMS, beside.HostileSteps, codes, guard["beside_hostile"]["mageguard_steps_paced_total"], beside.P50MS, beside.MeanMS,
		beside.P50MS/alone.P50MS, beside.MeanMS/alone.MeanMS, guard["alone"]["mageguard_batch_seconds_sum"], guard["beside_hostile"]["mageguard_batch_seconds_sum"])
	for i := range alone.Decisions {
		if alone.Decisions[i] != beside.Decisions[i] || math.Abs(alone.Scores[i]-beside.Scores[i]) > 1e-6 {
			t.Errorf("step %d: %s (score %g) alone, %s (%g) beside the hostile session", i, alone.Decisions[i], alone.Scores[i], beside.Decisions[i], beside.Scores[i])
		}
	}
	if beside.P50MS > 2*alone.P50MS || beside.MeanMS > 2*alone.MeanMS {
		t.Errorf("latency beside the hostile session: p50 %.0f ms, mean %.0f ms; alone %.0f ms, %.0f ms: more than 2×", beside.P50MS, beside.MeanMS, alone.P50MS, alone.MeanMS)
	}
	if codes[200] == 0 || len(codes) > 2 || (len(codes) == 2 && codes[409] == 0) {
		t.Errorf("hostile answers %v: want 200s (and 409 session_blocked, resumed)", codes)
	}
}
