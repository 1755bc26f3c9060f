// Package eval turns a guard's per-turn decisions into the metrics of
// docs/design.md#metrics and into reports a person reads.
//
// The flow is: the guard loop (package rollout) writes one Decision per
// trajectory × turn to decisions.jsonl; Compute derives report.json's
// Report from those decisions alone (a pure function: every number except
// n_skipped follows from decisions.jsonl); WriteReport writes report.json,
// report.md and PNG plots; Compare puts several reports side by side.
package eval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"unicode/utf8"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/internal/strictjson"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/prompt"
)

// Decision is one line of decisions.jsonl: what the guard decided at one
// turn of one trajectory, with the trajectory's facts repeated on every line
// so that each line stands alone.
type Decision struct {
	// TrajectoryID is the trajectory's id (dataset schema `id`).
	TrajectoryID string `json:"trajectory_id"`
	// Suite is the trajectory's suite (e.g. "banking").
	Suite string `json:"suite"`
	// AttackType is the trajectory's attack type; nil (JSON null) for benign runs.
	AttackType *string `json:"attack_type"`
	// Attack is true for an attack run (injection_task_id set), false for a benign one.
	Attack bool `json:"attack"`
	// Utility is the source run's own utility outcome, nil when unknown.
	Utility *bool `json:"utility"`
	// Turn is the action's index in the trajectory, from 0.
	Turn int `json:"turn"`
	// Label is the action's label: 1 = serves an attacker, 0 = benign.
	Label int `json:"label"`
	// Decision is the effective decision, after the format fallback: "approve" or "reject".
	Decision string `json:"decision"`
	// JudgeParsed is false when the judge's output was a format violation
	// (without votes, Decision is then the fallback "reject"). With votes, it
	// is true only when every vote parsed; Decision is their majority, in
	// which a vote that did not parse counts as "reject".
	JudgeParsed bool `json:"judge_parsed"`
	// MemoryParsed is false when the memory manager's output was a format
	// violation (the memory fell back to the previous one); nil when the
	// variant has no memory manager (judge-only).
	MemoryParsed *bool `json:"memory_parsed"`
	// MemoryChars is the length of the memory the judge saw, in Unicode code points (0 for judge-only).
	MemoryChars int `json:"memory_chars"`
	// Memory is the memory the judge saw (m_t), and Rationale the (first)
	// judge's rationale: what a person reads to see why the guard decided as
	// it did. Absent for an empty memory or rationale, and in files written
	// before they were recorded.
	Memory    string `json:"memory,omitempty"`
	Rationale string `json:"rationale,omitempty"`
	// GuardTokens counts the tokens the guard processed this turn: prompt +
	// generated tokens of every call (memory and judge; all K judge calls with votes).
	GuardTokens int `json:"guard_tokens"`
	// PrefixTokens is the system prompts' share of GuardTokens (what prefix caching saves).
	PrefixTokens int `json:"prefix_tokens"`
	// Votes holds the K sampled judge decisions (each after the fallback) of
	// the consensus variant (`--votes K`); empty otherwise. Decision is
	// rollout.Majority(Votes).
	Votes []string `json:"votes,omitempty"`
	// VoteTokens is the share of GuardTokens spent on the K−1 judge calls
	// beyond the first: the consensus variant's extra cost (0 without votes).
	VoteTokens int `json:"vote_tokens,omitempty"`
	// Score is the judge's p(reject) read from its decision token's
	// log-probs (rollout: Turn.Score; the mean over votes), 1 for a format
	// violation; absent in files written before scores existed.
	Score *float64 `json:"score,omitempty"`
}

// field describes one key of a decisions.jsonl line for strict decoding.
type field struct {
	name     string
	dst      any
	required bool // must be present
	nullable bool // may be JSON null
}

func (d *Decision) fields() []field {
	return []field{
		{"trajectory_id", &d.TrajectoryID, true, false},
		{"suite", &d.Suite, true, false},
		{"attack_type", &d.AttackType, true, true},
		{"attack", &d.Attack, true, false},
		{"utility", &d.Utility, true, true},
		{"turn", &d.Turn, true, false},
		{"label", &d.Label, true, false},
		{"decision", &d.Decision, true, false},
		{"judge_parsed", &d.JudgeParsed, true, false},
		{"memory_parsed", &d.MemoryParsed, true, true},
		{"memory_chars", &d.MemoryChars, true, false},
		{"memory", &d.Memory, false, false},
		{"rationale", &d.Rationale, false, false},
		{"guard_tokens", &d.GuardTokens, true, false},
		{"prefix_tokens", &d.PrefixTokens, true, false},
		{"votes", &d.Votes, false, true},
		{"vote_tokens", &d.VoteTokens, false, false},
		{"score", &d.Score, false, false},
	}
}

// parseDecision decodes one line strictly: every required field present,
// no unknown field, no null where a value is required, values in range.
// Errors name the field.
func parseDecision(line []byte) (Decision, error) {
	var d Decision
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return d, fmt.Errorf("not a JSON object: %w", err)
	}
	if raw == nil {
		return d, errors.New("null, want a JSON object")
	}
	if path, problem, ok := strictjson.Check(line); !ok {
		return d, fmt.Errorf("field %q: %s", path, problem)
	}
	for _, f := range d.fields() {
		v, ok := raw[f.name]
		if !ok {
			if f.required {
				return d, fmt.Errorf("field %q: missing", f.name)
			}
			continue
		}
		delete(raw, f.name)
		if !f.nullable && bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			return d, fmt.Errorf("field %q: null, want a value", f.name)
		}
		if err := json.Unmarshal(v, f.dst); err != nil {
			return d, fmt.Errorf("field %q: bad value %s: %w", f.name, v, err)
		}
	}
	if len(raw) > 0 {
		return d, fmt.Errorf("field %q: unknown field", slices.Sorted(maps.Keys(raw))[0])
	}
	return d, d.Validate()
}

// Validate checks the values of one decision; errors name the field.
func (d *Decision) Validate() error {
	switch {
	case d.TrajectoryID == "":
		return errors.New(`field "trajectory_id": empty`)
	case d.Turn < 0:
		return fmt.Errorf(`field "turn": %d, want >= 0`, d.Turn)
	case d.Label != 0 && d.Label != 1:
		return fmt.Errorf(`field "label": %d, want 0 or 1`, d.Label)
	case d.Decision != prompt.DecisionApprove && d.Decision != prompt.DecisionReject:
		return fmt.Errorf(`field "decision": %q, want "approve" or "reject"`, d.Decision)
	case !d.Attack && d.Label == 1:
		return errors.New(`field "label": 1 on a benign run ("attack": false), whose actions are all 0`)
	case !d.Attack && d.AttackType != nil:
		return fmt.Errorf(`field "attack_type": %q on a benign run ("attack": false), want null`, *d.AttackType)
	case !d.JudgeParsed && len(d.Votes) == 0 && d.Decision != prompt.DecisionReject:
		return fmt.Errorf(`field "decision": %q with "judge_parsed": false and no votes, want the fallback "reject"`, d.Decision)
	case d.MemoryChars < 0:
		return fmt.Errorf(`field "memory_chars": %d, want >= 0`, d.MemoryChars)
	case d.Memory != "" && utf8.RuneCountInString(d.Memory) != d.MemoryChars:
		return fmt.Errorf(`field "memory": %d code points, but "memory_chars" is %d`, utf8.RuneCountInString(d.Memory), d.MemoryChars)
	case d.GuardTokens < 0:
		return fmt.Errorf(`field "guard_tokens": %d, want >= 0`, d.GuardTokens)
	case d.PrefixTokens < 0 || d.PrefixTokens > d.GuardTokens:
		return fmt.Errorf(`field "prefix_tokens": %d, want in [0, guard_tokens=%d]`, d.PrefixTokens, d.GuardTokens)
	case d.VoteTokens < 0 || d.VoteTokens > d.GuardTokens:
		return fmt.Errorf(`field "vote_tokens": %d, want in [0, guard_tokens=%d]`, d.VoteTokens, d.GuardTokens)
	}
	if d.Score != nil && !(*d.Score >= 0 && *d.Score <= 1) {
		return fmt.Errorf(`field "score": %g, want in [0, 1]`, *d.Score)
	}
	if d.Score != nil && !d.JudgeParsed && len(d.Votes) == 0 && *d.Score != 1 {
		return fmt.Errorf(`field "score": %g with "judge_parsed": false and no votes, want the fallback's 1`, *d.Score)
	}
	for i, v := range d.Votes {
		if v != prompt.DecisionApprove && v != prompt.DecisionReject {
			return fmt.Errorf(`field "votes": vote %d is %q, want "approve" or "reject"`, i, v)
		}
	}
	if len(d.Votes) > 0 && d.Decision != rollout.Majority(d.Votes) {
		return fmt.Errorf(`field "decision": %q, but the majority of votes %v is %q`, d.Decision, d.Votes, rollout.Majority(d.Votes))
	}
	return nil
}

// Check verifies that decisions form whole trajectories: within a
// trajectory the facts (suite, attack_type, attack, utility) agree on every
// line and the turns are exactly 0, 1, …, n−1 (in any order). Errors name the
// record (1-based index into ds).
func Check(ds []Decision) error {
	return check(ds, func(i int) string { return fmt.Sprintf("record %d", i+1) })
}

func check(ds []Decision, where func(i int) string) error {
	first := map[string]int{}         // trajectory id → index of its first decision
	turns := map[string]map[int]int{} // trajectory id → turn → index
	var order []string
	for i := range ds {
		d := &ds[i]
		j, seen := first[d.TrajectoryID]
		if !seen {
			first[d.TrajectoryID] = i
			turns[d.TrajectoryID] = map[int]int{}
			order = append(order, d.TrajectoryID)
		} else if name, ok := sameTrajectory(&ds[j], d); !ok {
			return fmt.Errorf("%s: field %q: trajectory %q has a different %s on %s", where(i), name, d.TrajectoryID, name, where(j))
		}
		if k, dup := turns[d.TrajectoryID][d.Turn]; dup {
			return fmt.Errorf("%s: field \"turn\": trajectory %q has turn %d twice (also %s)", where(i), d.TrajectoryID, d.Turn, where(k))
		}
		turns[d.TrajectoryID][d.Turn] = i
	}
	for _, id := range order {
		n := len(turns[id])
		for t := 0; t < n; t++ {
			if _, ok := turns[id][t]; !ok {
				return fmt.Errorf("%s: field \"turn\": trajectory %q has %d turns but no turn %d (turns must be 0..%d)", where(first[id]), id, n, t, n-1)
			}
		}
	}
	return nil
}

// sameTrajectory reports whether a and b agree on the trajectory's facts,
// and if not, the first field that differs.
func sameTrajectory(a, b *Decision) (string, bool) {
	switch {
	case a.Suite != b.Suite:
		return "suite", false
	case !eqPtr(a.AttackType, b.AttackType):
		return "attack_type", false
	case a.Attack != b.Attack:
		return "attack", false
	case !eqPtr(a.Utility, b.Utility):
		return "utility", false
	}
	return "", true
}

func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// DecodeDecisions streams decisions.jsonl-formatted lines from r, calling fn
// for each decision in order. Blank lines are skipped. name is used in
// errors, which name the line and the field ("NAME line 3: field \"turn\": …").
// It checks each line alone; ReadDecisions also checks whole trajectories.
func DecodeDecisions(r io.Reader, name string, fn func(line int, d Decision) error) error {
	br := bufio.NewReader(r)
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(br, maxDecisionLine)
		if len(bytes.TrimSpace(line)) > 0 {
			d, perr := parseDecision(line)
			if perr != nil {
				return fmt.Errorf("%s line %d: %w", name, lineNo, perr)
			}
			if ferr := fn(lineNo, d); ferr != nil {
				return fmt.Errorf("%s line %d: %w", name, lineNo, ferr)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s line %d: %w", name, lineNo, err)
		}
	}
}

// maxDecisionLine bounds one line of decisions.jsonl (a line is ~300
// bytes; with votes, ~10 more per vote).
const maxDecisionLine = 1 << 20

// readLine reads one line (with its '\n') of at most max bytes.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, fmt.Errorf("line longer than %d bytes", max)
		}
		line = append(line, chunk...)
		if err != bufio.ErrBufferFull {
			return line, err
		}
	}
}

// ReadDecisions reads a decisions.jsonl file, checking every line (fields
// and values) and then whole trajectories (see Check). Errors name the
// file, the line and the field.
func ReadDecisions(path string) ([]Decision, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read decisions: %w", err)
	}
	defer f.Close()
	var ds []Decision
	var lines []int
	err = DecodeDecisions(f, path, func(line int, d Decision) error {
		ds = append(ds, d)
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := check(ds, func(i int) string { return fmt.Sprintf("%s line %d", path, lines[i]) }); err != nil {
		return nil, err
	}
	return ds, nil
}

// DecisionWriter writes decisions.jsonl one decision at a time (so a long
// eval streams its output) to a temporary file that Close renames into
// place: a crash never leaves a half-written decisions.jsonl.
type DecisionWriter struct {
	path string
	f    *atomicfile.File
	w    *bufio.Writer
	enc  *json.Encoder
}

// CreateDecisions starts writing decisions to path (via a temporary file in
// the same directory). Call Close to publish it, or Abort to discard it.
func CreateDecisions(path string) (*DecisionWriter, error) {
	f, err := atomicfile.Create(path)
	if err != nil {
		return nil, fmt.Errorf("write decisions: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return &DecisionWriter{path: path, f: f, w: w, enc: enc}, nil
}

// Write appends one decision after checking its values.
func (dw *DecisionWriter) Write(d Decision) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("write %s: trajectory %q turn %d: %w", dw.path, d.TrajectoryID, d.Turn, err)
	}
	if err := dw.enc.Encode(&d); err != nil {
		return fmt.Errorf("write %s: %w", dw.path, err)
	}
	return nil
}

// Close flushes the decisions and renames the temporary file to the path.
func (dw *DecisionWriter) Close() error {
	if err := dw.w.Flush(); err != nil {
		dw.f.Abort()
		return fmt.Errorf("write %s: %w", dw.path, err)
	}
	return dw.f.Commit()
}

// Abort discards what was written; the path is left untouched.
func (dw *DecisionWriter) Abort() { dw.f.Abort() }

// WriteDecisions writes ds to path as decisions.jsonl, atomically.
func WriteDecisions(path string, ds []Decision) error {
	dw, err := CreateDecisions(path)
	if err != nil {
		return err
	}
	for _, d := range ds {
		if err := dw.Write(d); err != nil {
			dw.Abort()
			return err
		}
	}
	return dw.Close()
}
