package serve

import (
	"strings"
	"testing"
)

// TestMetricsText pins the exposition format: cumulative buckets, sum and
// count, escaped label values.
func TestMetricsText(t *testing.T) {
	m := newMetrics(func() int { return 3 })
	m.request(`POST /v1/sessions/{id}/assess`, 200, 0.02)
	m.request(`POST /v1/sessions/{id}/assess`, 200, 0.3)
	m.request(`POST /v1/sessions/{id}/assess`, 429, 0.001)
	m.request("a\"b\\c\nd", 404, 0.001)
	m.batch(5, 0.2, 1000, 40, 1, 0)
	m.batch(1, 0.05, 200, 8, 0, 1)
	m.stepTiming(0.004, 0.03, 0.02)
	m.stepTiming(0.006, 0.2, 0.02)
	m.step(DecisionAllow)
	m.step(DecisionBlock)
	m.step(DecisionBlock)
	var b strings.Builder
	if err := m.write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# TYPE mageguard_http_requests_total counter\n",
		`mageguard_http_requests_total{route="POST /v1/sessions/{id}/assess",code="200"} 2` + "\n",
		`mageguard_http_requests_total{route="POST /v1/sessions/{id}/assess",code="429"} 1` + "\n",
		`mageguard_http_requests_total{route="a\"b\\c\nd",code="404"} 1` + "\n",
		// 0.001 and 0.02 are ≤ 0.025; 0.3 is ≤ 0.5 only.
		`mageguard_http_request_duration_seconds_bucket{route="POST /v1/sessions/{id}/assess",le="0.025"} 2` + "\n",
		`mageguard_http_request_duration_seconds_bucket{route="POST /v1/sessions/{id}/assess",le="0.25"} 2` + "\n",
		`mageguard_http_request_duration_seconds_bucket{route="POST /v1/sessions/{id}/assess",le="0.5"} 3` + "\n",
		`mageguard_http_request_duration_seconds_bucket{route="POST /v1/sessions/{id}/assess",le="+Inf"} 3` + "\n",
		`mageguard_http_request_duration_seconds_count{route="POST /v1/sessions/{id}/assess"} 3` + "\n",
		"mageguard_queue_depth 3\n",
		`mageguard_batch_steps_bucket{le="1"} 1` + "\n",
		`mageguard_batch_steps_bucket{le="4"} 1` + "\n",
		`mageguard_batch_steps_bucket{le="8"} 2` + "\n",
		"mageguard_batch_steps_sum 6\nmageguard_batch_steps_count 2\n",
		`mageguard_tokens_total{kind="prompt"} 1200` + "\n",
		`mageguard_tokens_total{kind="generated"} 48` + "\n",
		`mageguard_steps_total{decision="block"} 2` + "\n",
		`mageguard_format_violations_total{role="judge"} 1` + "\n",
		// 0.004 ≤ 0.005 < 0.006 ≤ 0.01; 0.03 ≤ 0.05 < 0.2 ≤ 0.25.
		`mageguard_step_phase_seconds_bucket{phase="prefill",le="0.005"} 1` + "\n",
		`mageguard_step_phase_seconds_bucket{phase="prefill",le="0.01"} 2` + "\n",
		`mageguard_step_phase_seconds_bucket{phase="memory",le="0.05"} 1` + "\n",
		`mageguard_step_phase_seconds_bucket{phase="memory",le="0.25"} 2` + "\n",
		`mageguard_step_phase_seconds_bucket{phase="judge",le="0.025"} 2` + "\n",
		`mageguard_step_phase_seconds_count{phase="judge"} 2` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(out, "\nd\"") {
		t.Error("a newline in a label value was not escaped")
	}
}
