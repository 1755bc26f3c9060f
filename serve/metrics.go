package serve

// GET /metrics in the Prometheus text exposition format (version 0.0.4),
// written here rather than with the Prometheus client library: a handful
// of counters, gauges and histograms need no dependency tree.

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/mageguard/mageguard/serve/store"
)

// Histogram bucket bounds.
var (
	latencyBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
	batchBuckets   = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}
)

// histogram counts observations into cumulative buckets.
type histogram struct {
	bounds []float64
	counts []uint64 // per bound (not cumulative), then +Inf
	sum    float64
	n      uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(v float64) {
	i := sort.SearchFloat64s(h.bounds, v) // first bound >= v
	h.counts[i]++
	h.sum += v
	h.n++
}

// metrics are the service's counters. Every method is safe for concurrent use.
type metrics struct {
	mu         sync.Mutex
	requests   map[[2]string]uint64  // (route, code) → answered requests
	durations  map[string]*histogram // route → request durations, seconds
	batches    *histogram            // steps per generation batch
	genSeconds *histogram            // seconds per generation batch (both calls)
	phases     map[string]*histogram // "prefill" | "memory" | "judge" → seconds per step (rollout.Timing)
	tokens     map[string]uint64     // "prompt" | "generated" → guard tokens
	steps      map[string]uint64     // "allow" | "block" → steps answered
	violations map[string]uint64     // "memory" | "judge" → format violations
	rejected   map[string]uint64     // why a step was not applied → count ("queue_full", "deadline", "too_long", "over_share", "error")
	created    uint64                // sessions created
	expired    uint64                // sessions deleted for serve.session_idle_s
	pacedSteps uint64                // steps held back for serve.max_session_share
	queueDepth func() int            // steps waiting for a batch now
	usage      func() store.Usage    // what the store holds now (nil: not reported)
	damaged    func() bool           // the store is damaged
}

func newMetrics(queueDepth func() int) *metrics {
	return &metrics{
		requests:   map[[2]string]uint64{},
		durations:  map[string]*histogram{},
		batches:    newHistogram(batchBuckets),
		genSeconds: newHistogram(latencyBuckets),
		phases:     map[string]*histogram{},
		tokens:     map[string]uint64{},
		steps:      map[string]uint64{},
		violations: map[string]uint64{},
		rejected:   map[string]uint64{},
		queueDepth: queueDepth,
	}
}

func (m *metrics) request(route string, code int, seconds float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[[2]string{route, strconv.Itoa(code)}]++
	h, ok := m.durations[route]
	if !ok {
		h = newHistogram(latencyBuckets)
		m.durations[route] = h
	}
	h.observe(seconds)
}

func (m *metrics) batch(steps int, seconds float64, prompt, generated, memBad, judgeBad int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.batches.observe(float64(steps))
	m.genSeconds.observe(seconds)
	m.tokens["prompt"] += uint64(prompt)
	m.tokens["generated"] += uint64(generated)
	m.violations["memory"] += uint64(memBad)
	m.violations["judge"] += uint64(judgeBad)
}

// stepPhases are the phases of a step's guard time (rollout.Timing), in
// the order the metrics list them.
var stepPhases = []string{"prefill", "memory", "judge"}

// stepTiming records one decided step's guard time by phase (seconds).
func (m *metrics) stepTiming(prefill, memory, judge float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, v := range []float64{prefill, memory, judge} {
		h, ok := m.phases[stepPhases[i]]
		if !ok {
			h = newHistogram(latencyBuckets)
			m.phases[stepPhases[i]] = h
		}
		h.observe(v)
	}
}

func (m *metrics) step(decision string) {
	m.mu.Lock()
	m.steps[decision]++
	m.mu.Unlock()
}

func (m *metrics) notApplied(reason string) {
	m.mu.Lock()
	m.rejected[reason]++
	m.mu.Unlock()
}

func (m *metrics) paced() {
	m.mu.Lock()
	m.pacedSteps++
	m.mu.Unlock()
}

func (m *metrics) sessionsExpired(n int) {
	m.mu.Lock()
	m.expired += uint64(n)
	m.mu.Unlock()
}

func (m *metrics) sessionCreated() {
	m.mu.Lock()
	m.created++
	m.mu.Unlock()
}

// write writes every metric in the text format.
func (m *metrics) write(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	family := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	family("mageguard_http_requests_total", "counter", "HTTP requests answered, by route and status code.")
	keys := make([][2]string, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "mageguard_http_requests_total{route=%s,code=%s} %d\n", labelValue(k[0]), labelValue(k[1]), m.requests[k])
	}
	family("mageguard_http_request_duration_seconds", "histogram", "Time from a request's arrival to its answer, by route.")
	for _, r := range slices.Sorted(maps.Keys(m.durations)) {
		writeHistogram(&b, "mageguard_http_request_duration_seconds", "route="+labelValue(r), m.durations[r])
	}
	family("mageguard_queue_depth", "gauge", "Steps waiting for a generation batch.")
	fmt.Fprintf(&b, "mageguard_queue_depth %d\n", m.queueDepth())
	family("mageguard_batch_steps", "histogram", "Steps (sessions) per generation batch; each batch is one memory generation and one judge generation.")
	writeHistogram(&b, "mageguard_batch_steps", "", m.batches)
	family("mageguard_batch_seconds", "histogram", "Seconds per generation batch (memory and judge calls).")
	writeHistogram(&b, "mageguard_batch_seconds", "", m.genSeconds)
	family("mageguard_step_phase_seconds", "histogram", "Seconds of a decided step's generation batch by phase: prefill (both calls' prompts), memory (the memory's generation after its prefill), judge (the judge's); prefill is 0 with a generator that cannot tell it (a server), whose memory and judge are then whole calls.")
	for _, p := range stepPhases {
		if h, ok := m.phases[p]; ok {
			writeHistogram(&b, "mageguard_step_phase_seconds", "phase="+labelValue(p), h)
		}
	}
	counters := []struct {
		name, help, label string
		values            map[string]uint64
		keys              []string
	}{
		{"mageguard_tokens_total", "Guard tokens processed: prompt and generated, both roles.", "kind", m.tokens, []string{"prompt", "generated"}},
		{"mageguard_steps_total", "Steps answered, by decision.", "decision", m.steps, []string{DecisionAllow, DecisionBlock}},
		{"mageguard_format_violations_total", "Guard calls whose output was not a valid tool call (the fallback applied), by role.", "role", m.violations, []string{"memory", "judge"}},
		{"mageguard_steps_not_applied_total", "Assess requests answered without running or storing a step, by reason.", "reason", m.rejected, []string{"queue_full", "deadline", "too_long", "over_share", "state_full", "error"}},
	}
	for _, c := range counters {
		family(c.name, "counter", c.help)
		for _, k := range c.keys {
			fmt.Fprintf(&b, "%s{%s=%s} %d\n", c.name, c.label, labelValue(k), c.values[k])
		}
	}
	family("mageguard_sessions_created_total", "counter", "Sessions created since the server started.")
	fmt.Fprintf(&b, "mageguard_sessions_created_total %d\n", m.created)
	family("mageguard_steps_paced_total", "counter", "Steps held back before the queue because their session took more than serve.max_session_share of the guard.")
	fmt.Fprintf(&b, "mageguard_steps_paced_total %d\n", m.pacedSteps)
	family("mageguard_sessions_expired_total", "counter", "Sessions deleted after serve.session_idle_s without a step.")
	fmt.Fprintf(&b, "mageguard_sessions_expired_total %d\n", m.expired)
	if m.usage != nil {
		u := m.usage()
		family("mageguard_sessions", "gauge", "Sessions stored (serve.max_sessions bounds them).")
		fmt.Fprintf(&b, "mageguard_sessions %d\n", u.Sessions)
		family("mageguard_state_bytes", "gauge", "Bytes of sessions and steps stored (serve.max_state_bytes bounds them).")
		fmt.Fprintf(&b, "mageguard_state_bytes %d\n", u.Bytes)
	}
	if m.damaged != nil {
		v := 0
		if m.damaged() {
			v = 1
		}
		family("mageguard_store_damaged", "gauge", "1 when the sessions database was found damaged while serving (the server then serves nothing).")
		fmt.Fprintf(&b, "mageguard_store_damaged %d\n", v)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeHistogram writes a histogram's cumulative buckets, sum and count;
// labels ("k=\"v\"") go before le.
func writeHistogram(b *strings.Builder, name, labels string, h *histogram) {
	sep := ""
	if labels != "" {
		sep = ","
	}
	var cum uint64
	for i, bound := range h.bounds {
		cum += h.counts[i]
		fmt.Fprintf(b, "%s_bucket{%s%sle=\"%s\"} %d\n", name, labels, sep, formatFloat(bound), cum)
	}
	cum += h.counts[len(h.bounds)]
	fmt.Fprintf(b, "%s_bucket{%s%sle=\"+Inf\"} %d\n", name, labels, sep, cum)
	braces := ""
	if labels != "" {
		braces = "{" + labels + "}"
	}
	fmt.Fprintf(b, "%s_sum%s %s\n%s_count%s %d\n", name, braces, formatFloat(h.sum), name, braces, h.n)
}

func formatFloat(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// labelValue quotes a label value as the text format wants: \\, \" and \n escaped.
func labelValue(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `"`, `\"`)
	s = strings.ReplaceAll(s, "\n", `\n`)
	return `"` + s + `"`
}
