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
	// MaxPromptTokens bounds a step's memory and judge prompts after
	// elision; a step with a longer one is answered 413 before it joins a
	// batch (or, for the judge's, alone in its batch).
	MaxPromptTokens int   `yaml:"max_prompt_tokens"`
	MaxSessions     int   `yaml:"max_sessions"`    // sessions stored at most; one more is answered 429
	MaxStateBytes   int64 `yaml:"max_state_bytes"` // bytes of sessions and steps stored at most; past it, creates and steps are answered 507
	// MaxSessionsPerTenant and MaxStateBytesPerTenant are MaxSessions and
	// MaxStateBytes for the sessions of one owner (a token's name): 429 and
	// 507 past them (0 = no such limit).
	MaxSessionsPerTenant   int     `yaml:"max_sessions_per_tenant"`
	MaxStateBytesPerTenant int64   `yaml:"max_state_bytes_per_tenant"`
	SessionIdleS           float64 `yaml:"session_idle_s"` // > 0: a session with no create, step or resume for this many seconds is deleted (0 = never)
	// MaxSessionShare is the most of the guard's time (over the last ~10
	// s) one session — or one agent's sessions together — may take while
	// others use it too; above it, its next step waits (fairshare.go). 1 =
	// no limit.
	MaxSessionShare float64 `yaml:"max_session_share"`
	Greedy          bool    `yaml:"greedy"` // argmax decoding; false samples at rollout.temperature, top_k, top_p
	Seed            uint64  `yaml:"seed"`   // seeds sampled decoding (greedy: false)
}

// DefaultConfig returns the defaults: batches of up to 32 steps gathered
// for at most 5 ms, 256 steps queued, a minute's deadline, blocking on the
// judge's decision, 1 MiB bodies, prompts of 8,192 tokens, 10,000
// sessions and 1 GiB stored (no limit per tenant), no idle expiry, a
// quarter of the guard's time per session (or agent) while others wait,
// greedy decoding.
func DefaultConfig() Config {
	return Config{
		BatchSize:       32,
		MaxWaitMS:       5,
		QueueSize:       256,
		DeadlineS:       60,
		Threshold:       0,
		MaxBodyBytes:    1 << 20,
		MaxPromptTokens: 8192,
		MaxSessions:     10000,
		MaxStateBytes:   1 << 30,
		SessionIdleS:    0,
		MaxSessionShare: 0.25,
		Greedy:          true,
		Seed:            1,
	}
}

// The longest deadline_s and session_idle_s: a day and a year, far below
// where seconds overflow a time.Duration (~292 years) once the server adds
// its write and shutdown margins to the deadline.
const (
	maxDeadlineS    = 24 * 60 * 60
	maxSessionIdleS = 365 * 24 * 60 * 60
)

// Validate checks the values; errors start with the key's name.
func (c *Config) Validate() error {
	switch {
	case c.BatchSize < 1 || c.BatchSize > 4096:
		return fmt.Errorf("batch_size must be in [1, 4096], got %d", c.BatchSize)
	case !(c.MaxWaitMS >= 0) || c.MaxWaitMS > 10000:
		return fmt.Errorf("max_wait_ms must be in [0, 10000], got %g", c.MaxWaitMS)
	case c.QueueSize < 1 || c.QueueSize > 1<<20:
		return fmt.Errorf("queue_size must be in [1, 1048576], got %d", c.QueueSize)
	case !(c.DeadlineS > 0 && c.DeadlineS <= maxDeadlineS):
		return fmt.Errorf("deadline_s must be in (0, %d] seconds, got %g", maxDeadlineS, c.DeadlineS)
	case !(c.Threshold >= 0 && c.Threshold <= 1):
		return fmt.Errorf("threshold must be in [0, 1] (0 = block on the judge's decision), got %g", c.Threshold)
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("max_body_bytes must be >= 1024, got %d", c.MaxBodyBytes)
	case c.MaxPromptTokens < 256:
		return fmt.Errorf("max_prompt_tokens must be >= 256, got %d", c.MaxPromptTokens)
	case c.MaxSessions < 1:
		return fmt.Errorf("max_sessions must be >= 1, got %d", c.MaxSessions)
	case c.MaxStateBytes < 1<<20:
		return fmt.Errorf("max_state_bytes must be >= 1048576, got %d", c.MaxStateBytes)
	case c.MaxSessionsPerTenant < 0:
		return fmt.Errorf("max_sessions_per_tenant must be >= 0 (0 = no limit), got %d", c.MaxSessionsPerTenant)
	case c.MaxStateBytesPerTenant != 0 && c.MaxStateBytesPerTenant < 1<<20:
		return fmt.Errorf("max_state_bytes_per_tenant must be 0 (no limit) or >= 1048576, got %d", c.MaxStateBytesPerTenant)
	case !(c.SessionIdleS >= 0 && c.SessionIdleS <= maxSessionIdleS):
		return fmt.Errorf("session_idle_s must be in [0, %d] seconds (0 = never), got %g", maxSessionIdleS, c.SessionIdleS)
	case !(c.MaxSessionShare > 0 && c.MaxSessionShare <= 1):
		return fmt.Errorf("max_session_share must be in (0, 1] (1 = no limit), got %g", c.MaxSessionShare)
	}
	return nil
}

func (c *Config) maxWait() time.Duration {
	return time.Duration(c.MaxWaitMS * float64(time.Millisecond))
}

func (c *Config) idle() time.Duration {
	return time.Duration(c.SessionIdleS * float64(time.Second))
}

func (c *Config) deadline() time.Duration {
	return time.Duration(c.DeadlineS * float64(time.Second))
}
