package mcpgate

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Audit events.
const (
	// EventDecision is written when the gateway has decided what to do
	// with a tools/call — before the call is forwarded, so a forwarded
	// call is on disk even if the process dies while the downstream runs it.
	EventDecision = "decision"
	// EventOutcome is written when a forwarded call has come back (or failed).
	EventOutcome = "outcome"
)

// Record is one line of the audit log (JSON).
type Record struct {
	Time       time.Time `json:"time"`
	Event      string    `json:"event"`             // EventDecision or EventOutcome
	MCPSession string    `json:"mcp_session"`       // the gateway's name of the client session
	Owner      string    `json:"owner,omitempty"`   // the name of the client's token
	Session    string    `json:"session,omitempty"` // the guard session (serve's id)
	Step       *int      `json:"step,omitempty"`    // the guard step, from 0 (none: the guard did not decide)
	Tool       string    `json:"tool"`
	// Arguments are the call's arguments as the guard's prompt shows them
	// (compacted, long strings elided).
	Arguments     json.RawMessage `json:"arguments,omitempty"`
	Decision      string          `json:"decision,omitempty"` // "allow" or "block"; "" when the guard did not decide
	Score         *float64        `json:"score,omitempty"`    // p(reject)
	Rationale     string          `json:"rationale,omitempty"`
	MemoryVersion int             `json:"memory_version,omitempty"` // the memory version the judge read
	GuardTokens   int             `json:"guard_tokens,omitempty"`
	GuardMS       int64           `json:"guard_ms,omitempty"` // decision: from the call's arrival to the guard's answer
	Forwarded     bool            `json:"forwarded"`
	Monitor       bool            `json:"monitor,omitempty"`       // --monitor: forwarded whatever the decision
	Error         string          `json:"error,omitempty"`         // why the guard did not decide, or why the forwarded call failed
	IsError       *bool           `json:"is_error,omitempty"`      // outcome: the tool's result was an error
	DownstreamMS  int64           `json:"downstream_ms,omitempty"` // outcome: the downstream's time
	// decision: the guard step's batch time by phase (rollout.Timing),
	// milliseconds to the microsecond: prefill, memory generation, judge
	// generation
	PrefillMS float64 `json:"prefill_ms,omitempty"`
	MemoryMS  float64 `json:"memory_ms,omitempty"`
	JudgeMS   float64 `json:"judge_ms,omitempty"`
	// decision: the guard step alone (serve's assess, the guard session's
	// creation at a client session's first call included), microseconds;
	// outcome: downstream_ms in microseconds. What a tools/call takes beyond
	// them is the gateway's own (make mcp-overhead).
	StepUS       int64 `json:"step_us,omitempty"`
	DownstreamUS int64 `json:"downstream_us,omitempty"`
}

// Audit is an append-only JSONL file of Records, each written and synced
// to disk before Write returns.
type Audit struct {
	mu   sync.Mutex
	f    *os.File
	path string
}

// OpenAudit opens (creating, mode 0600) the audit log at path for appending.
func OpenAudit(path string) (*Audit, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return &Audit{f: f, path: path}, nil
}

// Path is the log's file.
func (a *Audit) Path() string { return a.path }

// Write appends r as one line and syncs the file.
func (a *Audit) Write(r *Record) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, err := a.f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("audit log %s: %w", a.path, err)
	}
	if err := a.f.Sync(); err != nil {
		return fmt.Errorf("audit log %s: %w", a.path, err)
	}
	return nil
}

// Close closes the file.
func (a *Audit) Close() error { return a.f.Close() }

// ReadAudit reads every record of an audit log.
func ReadAudit(path string) ([]Record, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Record
	dec := json.NewDecoder(bytes.NewReader(data))
	for dec.More() {
		var r Record
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("%s: record %d: %w", path, len(out)+1, err)
		}
		out = append(out, r)
	}
	return out, nil
}
