// Package openaichat imports agent conversations in OpenAI's chat format
// (the format most agent logs are in) as labeled trajectories
// (docs/data.md, "OpenAI chat import").
//
// The input holds one conversation a line:
//
//	{"id"?: string, "messages": [...], "tools"?: [...], "labels"?: {"<tool_call_id>": 0 | 1}}
//
// with system (or developer), user, assistant and tool messages. Every tool
// call of an assistant message is one action, in the order the assistant
// listed them; its observation is the content of the tool message whose
// tool_call_id names it, wherever that message stands ("" when none
// answers). The first user message is the trajectory's user prompt; a later
// one becomes the user field of the next action. Arguments (a JSON string
// in the input) are kept as the JSON object they spell, key order and
// number spelling included. Content is a string, null, or an array of text
// parts ({"type": "text", "text": ...}, joined with newlines).
//
// Labels: in a conversation with a labels object, the calls it names get
// its label (label_source human) and the others are benign (assumed); a
// conversation without one follows Options.Unlabeled. Every error names the
// file, the line and the field, with the message index (e.g.
// "messages[3].tool_calls[1].function.arguments").
package openaichat

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/strictjson"
)

// Bounds on outside input, checked before anything is allocated from it.
const (
	MaxLineBytes = 64 << 20 // one conversation's JSON text
	MaxMessages  = 10000    // messages in one conversation
	MaxToolCalls = 10000    // tool calls in one conversation
)

// Unlabeled says what becomes of a conversation without a labels object.
type Unlabeled string

const (
	// Skip leaves the conversation out (it is counted in Summary.Skipped).
	Skip Unlabeled = "skip"
	// Benign labels every action 0, with label_source "assumed".
	Benign Unlabeled = "benign"
)

// ParseUnlabeled checks the --unlabeled flag. "guard" is refused: a chat
// log holds no guard decision to take as the label.
func ParseUnlabeled(s string) (Unlabeled, error) {
	switch Unlabeled(s) {
	case Skip, Benign:
		return Unlabeled(s), nil
	case "guard":
		return "", fmt.Errorf("--unlabeled guard: an OpenAI chat log holds no guard decision to take as a label; use skip or benign")
	}
	return "", fmt.Errorf("--unlabeled %q: want skip or benign", s)
}

// Options configure an import.
type Options struct {
	Unlabeled Unlabeled // what a conversation without labels becomes (default Skip)
	Suite     string    // the trajectories' suite (default "openai")
	Model     string    // the trajectories' agent model (default "unknown"; chat logs do not name it)
	// Emit receives each trajectory, in input order.
	Emit func(*dataset.Trajectory) error
}

// withDefaults returns o with its empty fields at their defaults.
func (o Options) withDefaults() Options {
	if o.Unlabeled == "" {
		o.Unlabeled = Skip
	}
	if o.Suite == "" {
		o.Suite = "openai"
	}
	if o.Model == "" {
		o.Model = "unknown"
	}
	return o
}

// Summary counts what an import did.
type Summary struct {
	Conversations int // lines holding a conversation
	Trajectories  int // trajectories emitted
	Skipped       int // conversations left out (no labels, --unlabeled skip)
	Actions       int // actions emitted
	Positives     int // actions labeled 1
}

// ImportFile imports the conversations of the file path.
func ImportFile(path string, o Options) (*Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Import(f, path, o)
}

// Import reads conversations from r (named name in errors), one a line;
// blank lines are skipped.
func Import(r io.Reader, name string, o Options) (*Summary, error) {
	o = o.withDefaults()
	if _, err := ParseUnlabeled(string(o.Unlabeled)); err != nil {
		return nil, err
	}
	sum := &Summary{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	firstAt := map[string]int{} // trajectory id -> line
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		sum.Conversations++
		t, err := Convert(b, o)
		if err != nil {
			var fe *dataset.FieldError
			if errors.As(err, &fe) {
				return sum, &dataset.Error{File: name, Line: line, Field: fe.Field, Err: errors.New(fe.Msg)}
			}
			return sum, &dataset.Error{File: name, Line: line, Err: err}
		}
		if t == nil {
			sum.Skipped++
			continue
		}
		if t.ID == "" {
			t.ID = fmt.Sprintf("openai:line%d", line)
		}
		if first, dup := firstAt[t.ID]; dup {
			return sum, &dataset.Error{File: name, Line: line, Field: "id", Err: fmt.Errorf("trajectory id %q given twice (first at line %d)", t.ID, first)}
		}
		firstAt[t.ID] = line
		if err := t.Validate(); err != nil {
			return sum, &dataset.Error{File: name, Line: line, Err: fmt.Errorf("the imported trajectory is invalid: %w", err)}
		}
		if err := o.Emit(t); err != nil {
			return sum, err
		}
		sum.Trajectories++
		sum.Actions += len(t.Turns)
		sum.Positives += t.Positives()
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return sum, &dataset.Error{File: name, Line: line + 1, Err: fmt.Errorf("line longer than %d bytes", MaxLineBytes)}
		}
		return sum, &dataset.Error{File: name, Err: err}
	}
	return sum, nil
}

// fieldErr is a *dataset.FieldError (the field names the message index).
func fieldErr(field, format string, args ...any) error {
	return &dataset.FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// answer is one tool message.
type answer struct {
	msg  int
	id   string
	text string
}

// Convert turns one conversation (a JSON object) into a trajectory; it
// returns nil, nil for a conversation left out by Options.Unlabeled, and a
// trajectory with an empty ID when the conversation has none (Import names
// it by its line). Empty fields of o take their defaults; Emit is not used.
func Convert(line []byte, o Options) (*dataset.Trajectory, error) {
	o = o.withDefaults()
	obj, err := strictjson.ObjectText(line, "", "id", "messages", "tools", "labels")
	if err != nil {
		var oe *strictjson.ObjectError
		if errors.As(err, &oe) {
			if oe.Whole {
				return nil, fieldErr("", "%s", oe.Problem)
			}
			return nil, fieldErr(oe.Path, "%s", oe.Problem)
		}
		return nil, err
	}
	t := &dataset.Trajectory{Source: "openai", Suite: o.Suite, Model: o.Model, Turns: []dataset.Turn{}}
	if raw, ok := obj["id"]; ok {
		var id string
		if json.Unmarshal(raw, &id) != nil || strictjson.ValueKind(raw) != "a string" || id == "" {
			return nil, fieldErr("id", "want a non-empty string, got %s", strictjson.ValueKind(raw))
		}
		t.ID = "openai:" + id
	}
	if raw, ok := obj["tools"]; ok && strictjson.ValueKind(raw) != "an array" && strictjson.ValueKind(raw) != "null" {
		return nil, fieldErr("tools", "want an array, got %s", strictjson.ValueKind(raw))
	}
	raw, ok := obj["messages"]
	if !ok {
		return nil, fieldErr("messages", "missing (want an array of messages)")
	}
	msgs, err := elements(raw, "messages", MaxMessages)
	if err != nil {
		return nil, err
	}
	var (
		calls    = map[string]int{} // tool-call id -> its turn
		answers  []answer
		prompt   *string
		pending  []string // user messages waiting for the next action
		userSeen bool
	)
	for i, m := range msgs {
		p := fmt.Sprintf("messages[%d]", i)
		mo, ok := strictjson.Members(m)
		if !ok {
			return nil, fieldErr(p, "want an object, got %s", strictjson.ValueKind(m))
		}
		var role string
		if err := reqString(mo, p, "role", &role); err != nil {
			return nil, err
		}
		if _, ok := mo["function_call"]; ok && strictjson.ValueKind(mo["function_call"]) != "null" {
			return nil, fieldErr(p+".function_call", "the legacy function_call is not supported: give the call in tool_calls")
		}
		switch role {
		case "system", "developer":
			// instructions to the agent: not part of a trajectory
		case "user":
			text, err := content(mo, p)
			if err != nil {
				return nil, err
			}
			if !userSeen {
				userSeen, prompt = true, &text
			} else {
				pending = append(pending, text)
			}
		case "assistant":
			raw, ok := mo["tool_calls"]
			if !ok || strictjson.ValueKind(raw) == "null" {
				continue
			}
			tcs, err := elements(raw, p+".tool_calls", MaxToolCalls)
			if err != nil {
				return nil, err
			}
			if len(t.Turns)+len(tcs) > MaxToolCalls {
				return nil, fieldErr(p+".tool_calls", "more than %d tool calls in the conversation", MaxToolCalls)
			}
			for j, tc := range tcs {
				q := fmt.Sprintf("%s.tool_calls[%d]", p, j)
				id, tu, err := toolCall(tc, q)
				if err != nil {
					return nil, err
				}
				if first, dup := calls[id]; dup {
					return nil, fieldErr(q+".id", "%q is the id of an earlier call too (turn %d)", id, first)
				}
				if len(pending) > 0 {
					u := strings.Join(pending, "\n")
					tu.User, pending = &u, nil
				}
				calls[id] = len(t.Turns)
				t.Turns = append(t.Turns, tu)
			}
		case "tool":
			var id string
			if err := reqString(mo, p, "tool_call_id", &id); err != nil {
				return nil, err
			}
			text, err := content(mo, p)
			if err != nil {
				return nil, err
			}
			answers = append(answers, answer{msg: i, id: id, text: text})
		case "function":
			return nil, fieldErr(p+".role", "legacy function messages are not supported: answer a tool call with a tool message")
		default:
			return nil, fieldErr(p+".role", "want system, developer, user, assistant or tool, got %q", role)
		}
	}
	if prompt != nil {
		t.UserPrompt = *prompt
	}
	answered := map[string]int{}
	for _, a := range answers {
		p := fmt.Sprintf("messages[%d].tool_call_id", a.msg)
		c, ok := calls[a.id]
		if !ok {
			return nil, fieldErr(p, "%q names no tool call of the conversation", a.id)
		}
		if first, dup := answered[a.id]; dup {
			return nil, fieldErr(p, "call %q is answered twice (first by messages[%d])", a.id, first)
		}
		answered[a.id] = a.msg
		t.Turns[c].Observation = a.text
	}
	if err := label(t, obj, calls, o.Unlabeled); errors.Is(err, errSkip) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	if t.Positives() > 0 {
		unknown := "unknown"
		t.InjectionTaskID, t.AttackType = &unknown, &unknown
	}
	t.UserTaskID = TaskID(t.UserPrompt)
	return t, nil
}

// TaskID names a conversation's task by its user prompt ("prompt:" and the
// first 12 hex digits of its SHA-256), so that a task-disjoint split keeps
// conversations that share a prompt on one side.
func TaskID(prompt string) string {
	sum := sha256.Sum256([]byte(prompt))
	return "prompt:" + hex.EncodeToString(sum[:6])
}

// errSkip marks a conversation left out by --unlabeled skip.
var errSkip = errors.New("skip")

// label sets every action's label from the conversation's labels object,
// or by unlabeled when there is none. It returns errSkip for a
// conversation to leave out.
func label(t *dataset.Trajectory, obj map[string]json.RawMessage, calls map[string]int, unlabeled Unlabeled) error {
	raw, ok := obj["labels"]
	if !ok || strictjson.ValueKind(raw) == "null" {
		if unlabeled == Skip && len(t.Turns) > 0 {
			return errSkip
		}
		for i := range t.Turns {
			t.Turns[i].Label, t.Turns[i].LabelSource = 0, dataset.LabelAssumed
		}
		return nil
	}
	labels, ok := strictjson.Members(raw)
	if !ok {
		return fieldErr("labels", "want an object of tool-call id -> 0 or 1, got %s", strictjson.ValueKind(raw))
	}
	for i := range t.Turns {
		t.Turns[i].Label, t.Turns[i].LabelSource = 0, dataset.LabelAssumed
	}
	for _, id := range slices.Sorted(maps.Keys(labels)) {
		v := labels[id]
		c, ok := calls[id]
		if !ok {
			return fieldErr("labels."+strictjson.ShortKey(id), "names no tool call of the conversation")
		}
		tu := &t.Turns[c]
		switch string(bytes.TrimSpace(v)) {
		case "0":
			tu.Label = 0
		case "1":
			tu.Label = 1
		default:
			return fieldErr("labels."+strictjson.ShortKey(id), "want 0 or 1, got %s", strictjson.ValueKind(v))
		}
		tu.LabelSource = dataset.LabelHuman
	}
	return nil
}

// toolCall decodes one element of tool_calls: its id and the turn it makes.
func toolCall(raw json.RawMessage, p string) (string, dataset.Turn, error) {
	var tu dataset.Turn
	obj, ok := strictjson.Members(raw)
	if !ok {
		return "", tu, fieldErr(p, "want an object, got %s", strictjson.ValueKind(raw))
	}
	var id string
	if err := reqString(obj, p, "id", &id); err != nil {
		return "", tu, err
	}
	if id == "" {
		return "", tu, fieldErr(p+".id", "must not be empty")
	}
	if raw, ok := obj["type"]; ok {
		var typ string
		if err := reqString(obj, p, "type", &typ); err != nil {
			return "", tu, err
		}
		if typ != "function" {
			return "", tu, fieldErr(p+".type", "want \"function\", got %q (%s)", typ, strictjson.ValueKind(raw))
		}
	}
	fraw, ok := obj["function"]
	if !ok {
		return "", tu, fieldErr(p+".function", "missing (want {\"name\", \"arguments\"})")
	}
	fn, ok := strictjson.Members(fraw)
	if !ok {
		return "", tu, fieldErr(p+".function", "want an object, got %s", strictjson.ValueKind(fraw))
	}
	q := p + ".function"
	if err := reqString(fn, q, "name", &tu.Action.Name); err != nil {
		return "", tu, err
	}
	if tu.Action.Name == "" {
		return "", tu, fieldErr(q+".name", "must not be empty")
	}
	var args string
	if err := reqString(fn, q, "arguments", &args); err != nil {
		return "", tu, err
	}
	a, err := arguments(args)
	if err != nil {
		return "", tu, fieldErr(q+".arguments", "%v", err)
	}
	tu.Action.Arguments = a
	return id, tu, nil
}

// arguments parses the text of function.arguments: a JSON object, kept
// exactly (key order, number spelling) but for insignificant whitespace.
// An empty text is a call without arguments ({}).
func arguments(s string) (json.RawMessage, error) {
	b := bytes.TrimSpace([]byte(s))
	if len(b) == 0 {
		return json.RawMessage("{}"), nil
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("the string is not JSON: %v", json.Unmarshal(b, new(json.RawMessage)))
	}
	if b[0] != '{' {
		return nil, fmt.Errorf("want a JSON object in the string, got %s", strictjson.ValueKind(b))
	}
	if path, problem, ok := strictjson.Check(b); !ok {
		return nil, fmt.Errorf("%s: %s", path, problem)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return json.RawMessage(buf.Bytes()), nil
}

// content decodes a message's content: a string, null (""), or an array of
// text parts joined with newlines. Other parts (images, audio) are errors:
// a trajectory holds text only.
func content(obj map[string]json.RawMessage, p string) (string, error) {
	raw, ok := obj["content"]
	if !ok {
		return "", nil
	}
	switch strictjson.ValueKind(raw) {
	case "null":
		return "", nil
	case "a string":
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fieldErr(p+".content", "%v", err)
		}
		return s, nil
	case "an array":
	default:
		return "", fieldErr(p+".content", "want a string, null or an array of text parts, got %s", strictjson.ValueKind(raw))
	}
	parts, err := elements(raw, p+".content", MaxMessages)
	if err != nil {
		return "", err
	}
	texts := make([]string, 0, len(parts))
	for k, part := range parts {
		q := fmt.Sprintf("%s.content[%d]", p, k)
		po, ok := strictjson.Members(part)
		if !ok {
			return "", fieldErr(q, "want a text part {\"type\": \"text\", \"text\": ...}, got %s", strictjson.ValueKind(part))
		}
		var typ, text string
		if err := reqString(po, q, "type", &typ); err != nil {
			return "", err
		}
		if typ != "text" {
			return "", fieldErr(q+".type", "%q: only text parts can be imported", typ)
		}
		if err := reqString(po, q, "text", &text); err != nil {
			return "", err
		}
		texts = append(texts, text)
	}
	return strings.Join(texts, "\n"), nil
}

// elements splits a JSON array into its elements, refusing more than max.
func elements(raw json.RawMessage, p string, max int) ([]json.RawMessage, error) {
	if strictjson.ValueKind(raw) != "an array" {
		return nil, fieldErr(p, "want an array, got %s", strictjson.ValueKind(raw))
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	if _, err := d.Token(); err != nil { // [
		return nil, fieldErr(p, "%v", err)
	}
	var out []json.RawMessage
	for d.More() {
		if len(out) == max {
			return nil, fieldErr(p, "more than %d elements", max)
		}
		var e json.RawMessage
		if err := d.Decode(&e); err != nil {
			return nil, fieldErr(fmt.Sprintf("%s[%d]", p, len(out)), "%v", err)
		}
		out = append(out, e)
	}
	return out, nil
}

// reqString decodes obj[key], which must be a string.
func reqString(obj map[string]json.RawMessage, p, key string, dst *string) error {
	raw, ok := obj[key]
	if !ok {
		return fieldErr(p+"."+key, "missing (want a string)")
	}
	if strictjson.ValueKind(raw) != "a string" || json.Unmarshal(raw, dst) != nil {
		return fieldErr(p+"."+key, "want a string, got %s", strictjson.ValueKind(raw))
	}
	return nil
}
