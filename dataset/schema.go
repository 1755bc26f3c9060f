// Package dataset holds mageguard's trajectory schema
// (docs/design.md#trajectory-schema), its streaming JSONL and Parquet readers
// and writers, validation of every record, and the operations on whole files:
// stats, task-disjoint splits, subsets and comparisons. Importers of benchmark
// logs live in subpackages (dataset/agentdojo).
//
// A file's format is chosen by its extension: ".jsonl" (one JSON object a
// line) or ".parquet" (the same fields, turns nested as a list of structs, the
// action arguments as a JSON-typed string column). Readers validate every
// record and fail on the first bad one with an *Error naming the file, the
// line (JSONL) or row (Parquet) and the field. Writers write to a temporary
// file beside the target and rename it on Close, so a failed or interrupted
// write never leaves a partial output file.
package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mageguard/mageguard/internal/strictjson"
)

// Trajectory is one agent run: the user's prompt and the agent's actions, each
// with the tool's observation and a label (1 = the action serves an attacker).
type Trajectory struct {
	ID              string  `json:"id"`                // unique in a file, e.g. "agentdojo:<model>:<suite>:<user_task>:<attack>:<injection_task>"
	Source          string  `json:"source"`            // the benchmark or generator, e.g. "agentdojo"
	Suite           string  `json:"suite"`             // task suite, e.g. "banking"
	UserTaskID      string  `json:"user_task_id"`      // the user task; suite + user_task_id is the unit of a split
	InjectionTaskID *string `json:"injection_task_id"` // the attacker's goal; nil = a benign run
	AttackType      *string `json:"attack_type"`       // e.g. "important_instructions"; nil for benign runs
	Model           string  `json:"model"`             // the agent model that produced the run
	UserPrompt      string  `json:"user_prompt"`       // the first user message
	Turns           []Turn  `json:"turns"`             // the agent's actions in order (may be empty)
	Utility         *bool   `json:"utility"`           // the benchmark's own outcome: the user task was solved (nil = unknown)
	Security        *bool   `json:"security"`          // the benchmark's own outcome: the attack succeeded (nil = unknown or benign)
	Tools           []Tool  `json:"tools,omitempty"`   // the tools the agent was shown (optional; tools.go)
}

// Turn is one action of the agent and what came back from it.
type Turn struct {
	User        *string `json:"user,omitempty"` // a new user message that arrived before this action (optional)
	Action      Action  `json:"action"`         // the tool call
	Observation string  `json:"observation"`    // the tool's output ("ERROR: ..." for a tool error)
	Label       int     `json:"label"`          // 1 = the action serves an attacker, 0 = benign
	// LabelSource says where the label came from (one of LabelSources;
	// "" = not recorded). LabelNote is an optional rationale for it.
	LabelSource string `json:"label_source,omitempty"`
	LabelNote   string `json:"label_note,omitempty"`
}

// The sources of a label (Turn.LabelSource).
const (
	LabelHuman   = "human"   // an operator labeled the action
	LabelJudge   = "judge"   // an LLM judge labeled it (data label)
	LabelRules   = "rules"   // a rules file labeled it (the AgentDojo importer)
	LabelGuard   = "guard"   // the guard's own decision, taken as the label
	LabelAssumed = "assumed" // no one labeled it; assumed benign
	LabelSynth   = "synth"   // the generator knows it (data synth)
)

// LabelSources lists the valid values of Turn.LabelSource.
var LabelSources = []string{LabelHuman, LabelJudge, LabelRules, LabelGuard, LabelAssumed, LabelSynth}

// ValidLabelSource reports whether s is one of LabelSources.
func ValidLabelSource(s string) bool { return slices.Contains(LabelSources, s) }

// Action is one tool call.
type Action struct {
	Name string `json:"name"` // the tool's name
	// Arguments is the call's arguments: a JSON object kept exactly as read
	// (key order and number spelling preserved; insignificant whitespace removed).
	Arguments json.RawMessage `json:"arguments"`
}

// IsAttack reports whether t is an attack run (it has an injection task).
func (t *Trajectory) IsAttack() bool { return t.InjectionTaskID != nil }

// Kind returns "attack" or "benign".
func (t *Trajectory) Kind() string {
	if t.IsAttack() {
		return "attack"
	}
	return "benign"
}

// TaskKey returns the unit of a task-disjoint split: suite + "/" + user_task_id.
func (t *Trajectory) TaskKey() string { return t.Suite + "/" + t.UserTaskID }

// Positives returns the number of actions labeled 1.
func (t *Trajectory) Positives() int {
	n := 0
	for _, tu := range t.Turns {
		n += tu.Label
	}
	return n
}

// FieldError is a problem with one field of a record. Field is a path such as
// "turns[3].label".
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return "field " + e.Field + ": " + e.Msg
}

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks the record against the schema: required strings are not
// empty, every string is valid UTF-8, every action has a name and an object
// of arguments (valid UTF-8, no key given twice), every label is 0 or 1,
// and a benign run (no injection task) has no action labeled 1. It returns
// a *FieldError naming the first bad field.
func (t *Trajectory) Validate() error {
	if err := t.checkUTF8(); err != nil {
		return err
	}
	for _, f := range []struct{ name, v string }{
		{"id", t.ID}, {"source", t.Source}, {"suite", t.Suite},
		{"user_task_id", t.UserTaskID}, {"model", t.Model},
	} {
		if f.v == "" {
			return fieldErr(f.name, "must not be empty")
		}
	}
	if t.InjectionTaskID != nil && *t.InjectionTaskID == "" {
		return fieldErr("injection_task_id", "must be null (benign) or a non-empty string")
	}
	if t.AttackType != nil && *t.AttackType == "" {
		return fieldErr("attack_type", "must be null or a non-empty string")
	}
	for i := range t.Turns {
		tu := &t.Turns[i]
		p := fmt.Sprintf("turns[%d]", i)
		if tu.Action.Name == "" {
			return fieldErr(p+".action.name", "must not be empty")
		}
		if err := checkArguments(tu.Action.Arguments); err != nil {
			return fieldErr(p+".action.arguments", "%s", err.Msg)
		}
		if tu.Label != 0 && tu.Label != 1 {
			return fieldErr(p+".label", "must be 0 or 1, got %d", tu.Label)
		}
		if tu.Label == 1 && !t.IsAttack() {
			return fieldErr(p+".label", "is 1 in a benign run (injection_task_id is null)")
		}
		if tu.LabelSource != "" && !ValidLabelSource(tu.LabelSource) {
			return fieldErr(p+".label_source", "must be one of %s, got %q", strings.Join(LabelSources, ", "), tu.LabelSource)
		}
	}
	return t.validateTools()
}

// checkArguments requires a JSON object with no key given twice and valid
// text in every string.
func checkArguments(raw json.RawMessage) *FieldError {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 {
		return &FieldError{Msg: "missing (want a JSON object)"}
	}
	if b[0] != '{' || !json.Valid(b) {
		return &FieldError{Msg: fmt.Sprintf("want a JSON object, got %s", strictjson.ValueKind(b))}
	}
	if path, problem, ok := strictjson.Check(b); !ok {
		return &FieldError{Msg: fmt.Sprintf("%s: %s", path, problem)}
	}
	return nil
}

// checkUTF8 requires every string field to be valid UTF-8 (Parquet
// strings are bytes as written; JSON text is checked when decoded).
func (t *Trajectory) checkUTF8() error {
	check := func(field, s string) error {
		if utf8.ValidString(s) {
			return nil
		}
		i := 0
		for i < len(s) {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return fieldErr(field, "holds invalid UTF-8 (byte 0x%02x at byte %d)", s[i], i)
	}
	opt := func(s *string) string {
		if s == nil {
			return ""
		}
		return *s
	}
	for _, f := range []struct{ name, v string }{
		{"id", t.ID}, {"source", t.Source}, {"suite", t.Suite}, {"user_task_id", t.UserTaskID},
		{"injection_task_id", opt(t.InjectionTaskID)}, {"attack_type", opt(t.AttackType)},
		{"model", t.Model}, {"user_prompt", t.UserPrompt},
	} {
		if err := check(f.name, f.v); err != nil {
			return err
		}
	}
	for i := range t.Turns {
		tu := &t.Turns[i]
		p := fmt.Sprintf("turns[%d]", i)
		if err := check(p+".user", opt(tu.User)); err != nil {
			return err
		}
		if err := check(p+".action.name", tu.Action.Name); err != nil {
			return err
		}
		if err := check(p+".observation", tu.Observation); err != nil {
			return err
		}
		if err := check(p+".label_source", tu.LabelSource); err != nil {
			return err
		}
		if err := check(p+".label_note", tu.LabelNote); err != nil {
			return err
		}
	}
	return nil
}

// compactJSON returns raw with insignificant whitespace removed.
func compactJSON(raw []byte) (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return json.RawMessage(buf.Bytes()), nil
}

// Equal reports whether a and b hold the same values. Arguments are compared
// as JSON values (so whitespace and key order do not matter; numbers compare
// by their decimal value).
func Equal(a, b *Trajectory) bool {
	if a.ID != b.ID || a.Source != b.Source || a.Suite != b.Suite || a.UserTaskID != b.UserTaskID ||
		a.Model != b.Model || a.UserPrompt != b.UserPrompt ||
		!eqStrPtr(a.InjectionTaskID, b.InjectionTaskID) || !eqStrPtr(a.AttackType, b.AttackType) ||
		!eqBoolPtr(a.Utility, b.Utility) || !eqBoolPtr(a.Security, b.Security) ||
		len(a.Turns) != len(b.Turns) || !toolsEqual(a.Tools, b.Tools) {
		return false
	}
	for i := range a.Turns {
		x, y := &a.Turns[i], &b.Turns[i]
		if !eqStrPtr(x.User, y.User) || x.Action.Name != y.Action.Name || x.Observation != y.Observation ||
			x.Label != y.Label || x.LabelSource != y.LabelSource || x.LabelNote != y.LabelNote ||
			!JSONEqual(x.Action.Arguments, y.Action.Arguments) {
			return false
		}
	}
	return true
}

// JSONEqual reports whether two JSON texts hold the same value (numbers are
// compared by their decimal text after normalisation, so 10 and 10.0 are equal).
func JSONEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	va, err1 := decodeNumbers(a)
	vb, err2 := decodeNumbers(b)
	if err1 != nil || err2 != nil {
		return false
	}
	return jsonValueEqual(va, vb)
}

func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

func jsonValueEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !jsonValueEqual(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonValueEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		fx, err1 := x.Float64()
		fy, err2 := y.Float64()
		return err1 == nil && err2 == nil && fx == fy
	default:
		return a == b
	}
}

func eqStrPtr(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func eqBoolPtr(a, b *bool) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
