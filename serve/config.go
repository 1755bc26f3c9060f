// Package serve is the guard online (docs/design.md#the-guard-loop,
// docs/design.md#serving): an HTTP/JSON service that keeps a session per
// agent task — the user's request, the shadow memory and every step's
// decision, in an embedded database — and answers, before each tool call,
// whether it may run. Concurrent steps of many sessions are gathered into one generation
// batch (rollout.Guard.Step: memory calls together, then judge calls).
//
// The API (openapi.yaml, docs/serving.md):
//
//	POST   /v1/sessions              {"user_prompt", "tools"?}            → 201 {"id"}
//	GET    /v1/sessions              → 200 {"sessions"}: the caller's (an operator: all)
//	POST   /v1/sessions/{id}/assess  {"action", "observation"?, "user_messages"?, "step"?}
//	                                 → 200 {"decision": "allow"|"block", "score", "rationale", …}
//	POST   /v1/sessions/{id}/resume  → 200 the session (after a block)
//	GET    /v1/sessions/{id}         → 200 the session as stored
//	DELETE /v1/sessions/{id}         → 204
//	GET    /healthz, /metrics, /openapi.yaml (no token)
package serve

import (
	"fmt"
	"math"
	"time"
)

// Config is the `serve` section: batching, admission, limits and the
// blocking rule of `mageguard serve`.
type Config struct {
	BatchSize    int     `yaml:"batch_size"`     // most steps (of distinct sessions) in one generation batch
	MaxWaitMS    float64 `yaml:"max_wait_ms"`    // how long a batch's first step waits for others to join it, milliseconds
	QueueSize    int     `yaml:"queue_size"`     // steps waiting for a batch at most; one more is answered 429
	DeadlineS    float64 `yaml:"deadline_s"`     // a step not decided within this many seconds of its arrival is answered 503 and not applied
	Threshold    float64 `yaml:"threshold"`      // > 0: block when score >= threshold instead of on the judge's decision (0 = off)
	MaxBodyBytes int64   `yaml:"max_body_bytes"` // largest request body; a larger one is answered 413
	Greedy       bool    `yaml:"greedy"`         // argmax decoding; false samples at rollout.temperature, top_k, top_p
	Seed         uint64  `yaml:"seed"`           // seeds sampled decoding (greedy: false)
}

// DefaultConfig returns the defaults: batches of up to 32 steps gathered
// for at most 5 ms, 256 steps queued, a minute's deadline, blocking on the
// judge's decision, 1 MiB bodies, greedy decoding.
func DefaultConfig() Config {
	return Config{
		BatchSize:    32,
		MaxWaitMS:    5,
		QueueSize:    256,
		DeadlineS:    60,
		Threshold:    0,
		MaxBodyBytes: 1 << 20,
		Greedy:       true,
		Seed:         1,
	}
}

// Validate checks the values; errors start with the key's name.
func (c *Config) Validate() error {
	switch {
	case c.BatchSize < 1 || c.BatchSize > 4096:
		return fmt.Errorf("batch_size must be in [1, 4096], got %d", c.BatchSize)
	case !(c.MaxWaitMS >= 0) || c.MaxWaitMS > 10000:
		return fmt.Errorf("max_wait_ms must be in [0, 10000], got %g", c.MaxWaitMS)
	case c.QueueSize < 1 || c.QueueSize > 1<<20:
		return fmt.Errorf("queue_size must be in [1, 1048576], got %d", c.QueueSize)
	case !(c.DeadlineS > 0) || math.IsInf(c.DeadlineS, 0):
		return fmt.Errorf("deadline_s must be > 0, got %g", c.DeadlineS)
	case !(c.Threshold >= 0 && c.Threshold <= 1):
		return fmt.Errorf("threshold must be in [0, 1] (0 = block on the judge's decision), got %g", c.Threshold)
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("max_body_bytes must be >= 1024, got %d", c.MaxBodyBytes)
	}
	return nil
}

func (c *Config) maxWait() time.Duration {
	return time.Duration(c.MaxWaitMS * float64(time.Millisecond))
}

func (c *Config) deadline() time.Duration {
	return time.Duration(c.DeadlineS * float64(time.Second))
}
