package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/mageguard/mageguard/scripts/internal/check"
	"github.com/mageguard/mageguard/serve"
)

// serveLoad (make serve-load): sessions × steps at once on a served tiny
// checkpoint, after one session alone for comparison. No step may be lost
// or answered twice; it reports throughput, p50/p99 latency and the mean
// generation batch size, also into out (a JSON file).
func serveLoad(t *check.T, bin, out string, sessions, steps int) {
	ckpt := tinyCheckpoint(t)
	p := startProcess(t, bin, append([]string{"--state", t.TempDir(), "--model", ckpt, "--token-file", tokenFile(t, "load-test-token-0123456789"),
		"--set", fmt.Sprintf("serve.batch_size=%d", sessions), "--set", "serve.max_wait_ms=20"}, loadSettings...)...)
	c := newLoadClient(p.base, "load-test-token-0123456789")
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
