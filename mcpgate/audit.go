package mcpgate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
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
	Event      string    `json:"event"`             // EventDecision, EventOutcome or EventToolChanged
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
	// DroppedNotifications (outcome) counts the downstream's notifications
	// during the call past mcp.max_notifications_per_call, not passed on.
	DroppedNotifications int64 `json:"dropped_notifications,omitempty"`
	// Flag marks a decision on a call to a tool that is not approved
	// (--monitor: forwarded all the same): "tool_changed: FIELDS" or
	// "tool_not_approved: new tool".
	Flag string `json:"flag,omitempty"`
	// tool_changed: the pinned and the listed definition's hashes ("" old:
	// a new tool) and the fields that differ.
	OldHash string   `json:"old_hash,omitempty"`
	NewHash string   `json:"new_hash,omitempty"`
	Fields  []string `json:"fields,omitempty"`
}

// Audit is an append-only JSONL file of Records, each written and synced
// to disk before Write returns. A record is on disk as one whole line or
// not at all: a write or sync that fails is truncated back to the end of
// the last whole record, so a later record never lands on a fragment.
type Audit struct {
	mu   sync.Mutex
	f    auditFile
	path string
	end  int64 // the end of the last whole record
	torn bool  // a failed write could not be truncated away: Write refuses until it can
}

// auditFile is what Audit needs of its file (an *os.File; a failing one
// in the tests).
type auditFile interface {
	io.Writer
	Sync() error
	Truncate(size int64) error
	Close() error
}

// OpenAudit opens (creating, mode 0600) the audit log at path for
// appending. A last line without its newline (a write cut by a crash:
// its call was not forwarded, since a call goes out only once its record
// is on disk) is truncated away.
func OpenAudit(path string) (*Audit, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	end, err := lastBoundary(f)
	if err == nil {
		err = f.Truncate(end)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	return &Audit{f: f, path: path, end: end}, nil
}

// lastBoundary is the offset just past f's last newline (0: none).
func lastBoundary(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 64<<10)
	for off := st.Size(); off > 0; {
		n := min(off, int64(len(buf)))
		off -= n
		if _, err := f.ReadAt(buf[:n], off); err != nil {
			return 0, err
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return off + int64(i) + 1, nil
		}
	}
	return 0, nil
}

// Path is the log's file.
func (a *Audit) Path() string { return a.path }

// Write appends r as one line and syncs the file. On error nothing of r
// stays in the log (or, if even the truncation failed, every later Write
// fails until a truncation succeeds).
func (a *Audit) Write(r *Record) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.torn {
		if err := a.f.Truncate(a.end); err != nil {
			return fmt.Errorf("audit log %s: a failed write could not be removed: %w", a.path, err)
		}
		a.torn = false
	}
	n, err := a.f.Write(buf.Bytes())
	if err == nil && n < buf.Len() {
		err = io.ErrShortWrite
	}
	if err == nil {
		err = a.f.Sync()
	}
	if err != nil {
		if terr := a.f.Truncate(a.end); terr != nil {
			a.torn = true
		}
		return fmt.Errorf("audit log %s: %w", a.path, err)
	}
	a.end += int64(n)
	return nil
}

// Close closes the file.
func (a *Audit) Close() error { return a.f.Close() }

// MaxAuditLine bounds one line of an audit log as ReadAudit reads it: a
// longer line is reported damaged (records are far smaller: arguments
// elided, an observation never in them).
const MaxAuditLine = 16 << 20

// DamagedLine is a line of an audit log that is not a record.
type DamagedLine struct {
	Line int    // from 1
	Err  string // why
}

// DecodeAudit reads the records of an audit log from r, one JSON object a
// line; a line that is not one (torn, edited, too long) is reported by
// number and the reading goes on. err is a failure to read r.
func DecodeAudit(r io.Reader) (recs []Record, damaged []DamagedLine, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	for line := 1; ; line++ {
		data, long, rerr := readLine(br)
		if rerr != nil && rerr != io.EOF {
			return recs, damaged, rerr
		}
		if rerr == io.EOF && len(data) == 0 && !long {
			return recs, damaged, nil
		}
		switch {
		case long:
			damaged = append(damaged, DamagedLine{line, fmt.Sprintf("longer than %d bytes", MaxAuditLine)})
		case len(bytes.TrimSpace(data)) == 0:
			damaged = append(damaged, DamagedLine{line, "empty"})
		case bytes.TrimSpace(data)[0] != '{':
			damaged = append(damaged, DamagedLine{line, "not a JSON object"})
		default:
			var rec Record
			if derr := json.Unmarshal(data, &rec); derr != nil {
				damaged = append(damaged, DamagedLine{line, derr.Error()})
			} else {
				recs = append(recs, rec)
			}
		}
		if rerr == io.EOF {
			return recs, damaged, nil
		}
	}
}

// readLine reads one line without its newline; long reports a line over
// MaxAuditLine (skipped to its end, its text not kept).
func readLine(br *bufio.Reader) (data []byte, long bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if !long {
			data = append(data, chunk...)
			if len(data) > MaxAuditLine {
				data, long = nil, true
			}
		}
		switch err {
		case bufio.ErrBufferFull:
			continue
		case nil:
			return bytes.TrimSuffix(data, []byte("\n")), long, nil
		}
		return data, long, err
	}
}

// ReadAudit reads every record of an audit log. Damaged lines are
// skipped and named, by number, in the error (a *DamagedError), which
// comes with the records that could be read.
func ReadAudit(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, damaged, err := DecodeAudit(f)
	if err != nil {
		return recs, fmt.Errorf("%s: %w", path, err)
	}
	if len(damaged) > 0 {
		return recs, &DamagedError{Path: path, Lines: damaged}
	}
	return recs, nil
}

// DamagedError names the damaged lines of an audit log.
type DamagedError struct {
	Path  string
	Lines []DamagedLine
}

func (e *DamagedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d damaged line(s):", e.Path, len(e.Lines))
	for i, l := range e.Lines {
		if i == 10 {
			fmt.Fprintf(&b, " (and %d more)", len(e.Lines)-i)
			break
		}
		fmt.Fprintf(&b, " line %d: %s;", l.Line, l.Err)
	}
	return strings.TrimSuffix(b.String(), ";")
}
