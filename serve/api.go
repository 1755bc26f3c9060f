package serve

// The API's request bodies, decoded strictly: one JSON object, no unknown
// field, no key given twice at any depth (JSON parsers disagree on which
// value wins, so a guard and the tool it guards could read different
// arguments), every value of its type. Errors name the field by its path
// ("action.arguments", "tools[2].name").

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/strictjson"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/serve/store"
)

// Decisions of an assess answer.
const (
	DecisionAllow = store.DecisionAllow
	DecisionBlock = store.DecisionBlock
)

// The stored session and its parts, as the API shows them.
type (
	Session = store.Session
	Step    = store.Step
	Tool    = store.Tool
)

// Session statuses.
const (
	StatusActive  = store.StatusActive  // assess calls run
	StatusBlocked = store.StatusBlocked // a step was blocked: assess calls get 409 until a resume
)

// ShortText is untrusted text as an error message quotes it: at most 64
// bytes of it, valid UTF-8, with "…" when it was cut.
func ShortText(s string) string { return strictjson.ShortKey(s) }

// CreateRequest is POST /v1/sessions.
type CreateRequest struct {
	UserPrompt string // required, not empty
	Tools      []Tool // optional: the agent's tools; an assessed action must name one of them
}

// AssessRequest is POST /v1/sessions/{id}/assess.
type AssessRequest struct {
	Action       dataset.Action // required: the pending tool call
	Observation  *string        // the previous action's observation (not at a session's first step)
	UserMessages []string       // user messages since the last call
	Step         *int           // optional: the index this step must have (idempotent retries)
	// ShownTools (in-process front ends only; ParseAssess never sets it)
	// are shown to the memory at the session's first step in place of the
	// session's declared tools, without restricting its actions to them:
	// mageguard mcp's tools, as its client was shown them.
	ShownTools []Tool
}

// AssessResponse is the answer of an assess call.
type AssessResponse struct {
	Decision      string  `json:"decision"`       // "allow" or "block"
	Score         float64 `json:"score"`          // p(reject) from the judge's decision token
	Rationale     string  `json:"rationale"`      // the judge's rationale
	MemoryVersion int     `json:"memory_version"` // the memory version the judge read
	Tokens        int     `json:"tokens"`         // guard tokens of the step
	LatencyMS     int64   `json:"latency_ms"`     // from the request's arrival to its decision
	Step          int     `json:"step"`           // the step's index in the session, from 0
	// Timing is the guard's time for the step's generation batch by phase
	// (the prompts' prefill, the memory's and the judge's generation), for
	// in-process front ends (mageguard mcp's audit). It is not part of the
	// HTTP answer, which a retry repeats byte for byte from the store, and
	// is zero in a retried step's stored answer.
	Timing rollout.Timing `json:"-"`
}

// SessionView is GET /v1/sessions/{id}: the session and its steps.
type SessionView struct {
	*Session
	Steps []Step `json:"steps"`
}

// ErrorBody is every error answer: {"error": {"code", "message", "field"?}}.
type ErrorBody struct {
	Error APIError `json:"error"`
}

// APIError is an error answer's content.
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`            // e.g. "unknown_field", "session_blocked"
	Message string `json:"message"`         // what is wrong, for a person
	Field   string `json:"field,omitempty"` // the request field at fault, by path

	retryAfter string // the answer's Retry-After header ("": none)
	cause      error  // what failed, for the log (not the answer)
}

func (e *APIError) Error() string { return e.Message }

// badField is a 400 naming a field.
func badField(field, code, format string, args ...any) *APIError {
	return &APIError{Status: 400, Code: code, Field: field, Message: fmt.Sprintf("%s: ", field) + fmt.Sprintf(format, args...)}
}

// strictObject reads one JSON object from data (strictjson.ObjectText: no
// key twice at any depth, only the allowed keys, nothing after it, no
// invalid UTF-8 or escaped lone surrogate in any key or string) and
// returns its members' raw values; a refusal is a 400 naming the field by
// its path ("body" for the body as a whole).
func strictObject(data []byte, path string, allowed ...string) (map[string]json.RawMessage, error) {
	m, err := strictjson.ObjectText(data, path, allowed...)
	var e *strictjson.ObjectError
	if errors.As(err, &e) {
		field := e.Path
		if e.Whole && field == "" {
			field = "body"
		}
		return nil, badField(field, objectErrorCodes[e.Kind], "%s", e.Problem)
	}
	return m, err
}

// objectErrorCodes are the API's error codes of strictjson's refusals.
var objectErrorCodes = map[strictjson.Kind]string{
	strictjson.Syntax:    "invalid_json",
	strictjson.Trailing:  "invalid_json",
	strictjson.NotObject: "invalid_type",
	strictjson.Duplicate: "duplicate_key",
	strictjson.Unknown:   "unknown_field",
	strictjson.TooDeep:   "invalid_value",
	strictjson.BadText:   "invalid_value",
}

// jsonString decodes a JSON string value.
func jsonString(raw json.RawMessage, field string) (string, error) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", badField(field, "invalid_type", "want a string")
	}
	if !utf8.ValidString(s) {
		return "", badField(field, "invalid_value", "not valid UTF-8")
	}
	return s, nil
}

// jsonArray decodes a JSON array into its elements' raw values.
func jsonArray(raw json.RawMessage, field string) ([]json.RawMessage, error) {
	var items []json.RawMessage
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &items) != nil {
		return nil, badField(field, "invalid_type", "want an array")
	}
	return items, nil
}

// ParseCreate decodes a POST /v1/sessions body.
func ParseCreate(data []byte) (*CreateRequest, error) {
	m, err := strictObject(data, "", "user_prompt", "tools")
	if err != nil {
		return nil, err
	}
	var req CreateRequest
	raw, ok := m["user_prompt"]
	if !ok {
		return nil, badField("user_prompt", "missing_field", "required")
	}
	if req.UserPrompt, err = jsonString(raw, "user_prompt"); err != nil {
		return nil, err
	}
	if strings.TrimSpace(req.UserPrompt) == "" {
		return nil, badField("user_prompt", "invalid_value", "empty")
	}
	req.Tools = []Tool{}
	if raw, ok := m["tools"]; ok && string(raw) != "null" {
		items, err := jsonArray(raw, "tools")
		if err != nil {
			return nil, err
		}
		seen := map[string]bool{}
		for i, it := range items {
			tool, err := parseTool(it, "tools["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			if seen[tool.Name] {
				return nil, badField("tools["+strconv.Itoa(i)+"].name", "duplicate_tool", "tool %q declared twice", ShortText(tool.Name))
			}
			seen[tool.Name] = true
			req.Tools = append(req.Tools, tool)
		}
	}
	return &req, nil
}

// parseTool reads a tool declaration: {"name", "description"?,
// "parameters"?} or the OpenAI form {"type": "function", "function": {…}}.
func parseTool(raw json.RawMessage, path string) (Tool, error) {
	m, err := strictObject(raw, path, "type", "function", "name", "description", "parameters")
	if err != nil {
		return Tool{}, err
	}
	if fn, ok := m["function"]; ok {
		if _, ok := m["name"]; ok {
			return Tool{}, badField(path+".name", "invalid_value", "give the tool as {name, …} or {type, function}, not both")
		}
		if t, ok := m["type"]; !ok || string(t) != `"function"` {
			return Tool{}, badField(path+".type", "invalid_value", `want "function"`)
		}
		path += ".function"
		if m, err = strictObject(fn, path, "name", "description", "parameters", "strict"); err != nil {
			return Tool{}, err
		}
	} else if _, ok := m["type"]; ok {
		return Tool{}, badField(path+".type", "invalid_value", `"type" goes with "function"`)
	}
	var t Tool
	raw, ok := m["name"]
	if !ok {
		return Tool{}, badField(path+".name", "missing_field", "required")
	}
	if t.Name, err = jsonString(raw, path+".name"); err != nil {
		return Tool{}, err
	}
	if t.Name == "" || len(t.Name) > 256 {
		return Tool{}, badField(path+".name", "invalid_value", "want 1 to 256 bytes")
	}
	if raw, ok := m["description"]; ok {
		if t.Description, err = jsonString(raw, path+".description"); err != nil {
			return Tool{}, err
		}
	}
	if raw, ok := m["parameters"]; ok {
		if len(raw) == 0 || raw[0] != '{' {
			return Tool{}, badField(path+".parameters", "invalid_type", "want a JSON object (a JSON schema)")
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return Tool{}, badField(path+".parameters", "invalid_json", "%v", err)
		}
		t.Parameters = buf.Bytes()
	}
	return t, nil
}

// ParseAssess decodes a POST /v1/sessions/{id}/assess body.
func ParseAssess(data []byte) (*AssessRequest, error) {
	m, err := strictObject(data, "", "action", "observation", "user_messages", "step")
	if err != nil {
		return nil, err
	}
	var req AssessRequest
	raw, ok := m["action"]
	if !ok {
		return nil, badField("action", "missing_field", "required")
	}
	am, err := strictObject(raw, "action", "name", "arguments")
	if err != nil {
		return nil, err
	}
	nameRaw, ok := am["name"]
	if !ok {
		return nil, badField("action.name", "missing_field", "required")
	}
	if req.Action.Name, err = jsonString(nameRaw, "action.name"); err != nil {
		return nil, err
	}
	if req.Action.Name == "" || len(req.Action.Name) > 256 {
		return nil, badField("action.name", "invalid_value", "want 1 to 256 bytes")
	}
	args, ok := am["arguments"]
	if !ok || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	if args[0] != '{' {
		return nil, badField("action.arguments", "invalid_type", "want a JSON object")
	}
	// Compact, as the dataset reader does: the guard sees the same text
	// for the same call, however the agent spaced it.
	var buf bytes.Buffer
	if err := json.Compact(&buf, args); err != nil {
		return nil, badField("action.arguments", "invalid_json", "%v", err)
	}
	req.Action.Arguments = buf.Bytes()
	if raw, ok := m["observation"]; ok && string(raw) != "null" {
		obs, err := jsonString(raw, "observation")
		if err != nil {
			return nil, err
		}
		req.Observation = &obs
	}
	if raw, ok := m["user_messages"]; ok && string(raw) != "null" {
		items, err := jsonArray(raw, "user_messages")
		if err != nil {
			return nil, err
		}
		for i, it := range items {
			s, err := jsonString(it, "user_messages["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			req.UserMessages = append(req.UserMessages, s)
		}
	}
	if raw, ok := m["step"]; ok && string(raw) != "null" {
		n, err := strconv.Atoi(string(raw))
		if err != nil || n < 0 {
			return nil, badField("step", "invalid_value", "want an integer >= 0")
		}
		req.Step = &n
	}
	return &req, nil
}

// LabelRequest is POST /v1/sessions/{id}/steps/{n}/label.
type LabelRequest struct {
	Label int    // required: 1, the step's action was malicious; 0, benign
	Note  string // optional: at most MaxNoteBytes
}

// MaxNoteBytes bounds a label's note.
const MaxNoteBytes = 4096

// ParseLabel decodes a POST /v1/sessions/{id}/steps/{n}/label body.
func ParseLabel(data []byte) (*LabelRequest, error) {
	m, err := strictObject(data, "", "label", "note")
	if err != nil {
		return nil, err
	}
	var req LabelRequest
	raw, ok := m["label"]
	switch {
	case !ok:
		return nil, badField("label", "missing_field", "required (0: benign, 1: malicious)")
	case string(raw) == "0":
	case string(raw) == "1":
		req.Label = 1
	default:
		return nil, badField("label", "invalid_value", "want 0 (benign) or 1 (malicious)")
	}
	if raw, ok := m["note"]; ok && string(raw) != "null" {
		if req.Note, err = jsonString(raw, "note"); err != nil {
			return nil, err
		}
		if len(req.Note) > MaxNoteBytes {
			return nil, badField("note", "invalid_value", "%d bytes, more than %d", len(req.Note), MaxNoteBytes)
		}
	}
	return &req, nil
}

// ResultRequest is POST /v1/sessions/{id}/steps/{n}/result: what step n's
// action returned, as the agent would send it as the next step's
// observation.
type ResultRequest struct {
	Observation string // required
}

// ParseResult decodes a POST /v1/sessions/{id}/steps/{n}/result body.
func ParseResult(data []byte) (*ResultRequest, error) {
	m, err := strictObject(data, "", "observation")
	if err != nil {
		return nil, err
	}
	raw, ok := m["observation"]
	if !ok || string(raw) == "null" {
		return nil, badField("observation", "missing_field", "required (what the step's action returned)")
	}
	var req ResultRequest
	if req.Observation, err = jsonString(raw, "observation"); err != nil {
		return nil, err
	}
	return &req, nil
}

// ParseEmpty accepts an empty body or an empty JSON object (resume).
func ParseEmpty(data []byte) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	_, err := strictObject(data, "")
	return err
}

// isAPIError returns the *APIError in err, if any.
func isAPIError(err error) (*APIError, bool) {
	var e *APIError
	ok := errors.As(err, &e)
	return e, ok
}
