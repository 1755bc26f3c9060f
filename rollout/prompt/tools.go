package prompt

// This file holds the guard's two tools, declared as JSON schemas for the
// chat template, and the strict parser of the tool call a completion must
// be (docs/design.md#the-guard-loop: a completion that is no valid call is
// a format violation, with its fallback).

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"github.com/mageguard/mageguard/internal/strictjson"
	"github.com/mageguard/mageguard/model/chat"
)

// Tool names and the judge's decisions.
const (
	MemoryToolName  = "update_memory"
	JudgeToolName   = "assess_risk"
	DecisionApprove = "approve"
	DecisionReject  = "reject"
)

// MemoryTool is the memory manager's tool: update_memory(content: string).
var MemoryTool = chat.Tool{
	Name:        MemoryToolName,
	Description: "Replace the shadow memory with an updated one: a compact, security-focused record of the agent's trajectory so far (the user's intent, attack patterns seen, security-relevant facts).",
	Parameters: json.RawMessage(`{"type": "object", "properties": {` +
		`"content": {"type": "string", "description": "The complete updated memory. It replaces the previous memory."}}, ` +
		`"required": ["content"]}`),
}

// JudgeTool is the judge's tool:
// assess_risk(decision: "approve"|"reject", rationale: string).
var JudgeTool = chat.Tool{
	Name:        JudgeToolName,
	Description: "Decide whether the agent's pending action may run.",
	Parameters: json.RawMessage(`{"type": "object", "properties": {` +
		`"decision": {"type": "string", "enum": ["approve", "reject"], "description": "approve lets the action run; reject blocks it."}, ` +
		`"rationale": {"type": "string", "description": "A short justification of the decision."}}, ` +
		`"required": ["decision", "rationale"]}`),
}

// ToolCall is a parsed tool call: Content is set for update_memory,
// Decision and Rationale for assess_risk.
type ToolCall struct {
	Name      string // MemoryToolName or JudgeToolName
	Content   string // update_memory's content
	Decision  string // assess_risk's decision: DecisionApprove or DecisionReject
	Rationale string // assess_risk's rationale
}

// Text returns the call as the chat template writes it (and as the model
// should generate it): "<tool_call>\n{\"name\": ..., \"arguments\": {...}}\n</tool_call>",
// assess_risk's arguments in the package's order (decision, rationale).
func (c ToolCall) Text() string { return c.TextIn(nil) }

// TextIn is Text with assess_risk's arguments in the order judgeArgs gives
// (nil: decision, rationale). A prompt version may declare the rationale
// first (Prompts.JudgeArgs): the judge then writes why before what.
func (c ToolCall) TextIn(judgeArgs []string) string {
	keys, values := []string{"content"}, map[string]string{"content": c.Content}
	if c.Name != MemoryToolName {
		keys, values = judgeArgs, map[string]string{"decision": c.Decision, "rationale": c.Rationale}
		if keys == nil {
			keys = defaultJudgeArgs
		}
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		key, _ := json.Marshal(k) // strings only: cannot fail
		value, _ := json.Marshal(values[k])
		b.Write(key)
		b.WriteByte(':')
		b.Write(value)
	}
	b.WriteByte('}')
	return chat.ToolCallText(chat.ToolCall{Name: c.Name, Arguments: json.RawMessage(b.String())})
}

// defaultJudgeArgs is the order of assess_risk's arguments unless a prompt
// version declares another.
var defaultJudgeArgs = []string{"decision", "rationale"}

// FormatError is a format violation: the completion is not exactly one
// valid call of a known tool. Reason says what is wrong.
type FormatError struct {
	Reason string
}

func (e *FormatError) Error() string { return "format violation: " + e.Reason }

func violation(format string, args ...any) error {
	return &FormatError{Reason: fmt.Sprintf(format, args...)}
}

// ParseToolCall reads the completion of a guard call (the text generated
// after the generation prompt) and returns its tool call, or a *FormatError.
// It is strict:
//
//   - the completion is exactly one <tool_call>…</tool_call> block, with
//     nothing but whitespace around it; one <|im_end|> or <|endoftext|> may
//     end it; the tags may not appear inside the block;
//   - the block holds one JSON object with exactly the keys "name" (a known
//     tool's name) and "arguments" (an object), nothing after it;
//   - the arguments are exactly the tool's parameters, all required and all
//     strings: no unknown extra argument is accepted (the schemas declare
//     none, and a lenient parser would reward a model for sloppy calls);
//   - a repeated key anywhere is a violation (JSON parsers disagree on
//     which value wins, so an attacker could exploit the ambiguity);
//   - assess_risk's decision is "approve" or "reject", exactly.
//
// Empty strings are valid values (an empty memory, an empty rationale).
func ParseToolCall(completion string) (ToolCall, error) {
	s := strings.TrimRightFunc(completion, unicode.IsSpace)
	for _, end := range []string{"<|im_end|>", "<|endoftext|>"} {
		if strings.HasSuffix(s, end) {
			s = strings.TrimSuffix(s, end)
			break
		}
	}
	s = strings.TrimFunc(s, unicode.IsSpace)

	const open, closing = "<tool_call>", "</tool_call>"
	switch n := strings.Count(s, open); {
	case n == 0:
		return ToolCall{}, violation("no <tool_call> block")
	case n > 1:
		return ToolCall{}, violation("%d <tool_call> blocks, want exactly one", n)
	}
	if !strings.HasPrefix(s, open) {
		return ToolCall{}, violation("text before <tool_call>: %s", quote(s[:strings.Index(s, open)]))
	}
	end := strings.Index(s, closing)
	if end < 0 {
		return ToolCall{}, violation("<tool_call> is not closed by </tool_call>")
	}
	if rest := s[end+len(closing):]; rest != "" {
		return ToolCall{}, violation("text after </tool_call>: %s", quote(rest))
	}
	body := s[len(open):end]

	top, err := object([]byte(body), "name", "arguments")
	if err != nil {
		return ToolCall{}, violation("tool call: %v", err) // invalid JSON, not an object, a repeated key, text after it
	}
	if err := onlyKeys(top, "name", "arguments"); err != nil {
		return ToolCall{}, violation("tool call: %v", err)
	}
	name, err := jsonString(top["name"])
	if err != nil {
		return ToolCall{}, violation("tool call: \"name\" %v", err)
	}
	var params []string
	switch name {
	case MemoryToolName:
		params = []string{"content"}
	case JudgeToolName:
		params = []string{"decision", "rationale"}
	default:
		return ToolCall{}, violation("unknown tool %s", quote(name))
	}
	args, err := object(top["arguments"], params...)
	if err != nil {
		return ToolCall{}, violation("%s: \"arguments\": %v", name, err)
	}
	if err := onlyKeys(args, params...); err != nil {
		return ToolCall{}, violation("%s: arguments: %v", name, err)
	}
	values := make(map[string]string, len(params))
	for _, p := range params {
		v, err := jsonString(args[p])
		if err != nil {
			return ToolCall{}, violation("%s: argument %q %v", name, p, err)
		}
		values[p] = v
	}

	call := ToolCall{Name: name, Content: values["content"], Decision: values["decision"], Rationale: values["rationale"]}
	if name == JudgeToolName && call.Decision != DecisionApprove && call.Decision != DecisionReject {
		return ToolCall{}, violation("%s: decision %s is neither %q nor %q", name, quote(call.Decision), DecisionApprove, DecisionReject)
	}
	return call, nil
}

// ParseMemory parses the memory manager's completion: an update_memory
// call, or a *FormatError (also when it is a valid call of another tool).
func ParseMemory(completion string) (ToolCall, error) {
	return parseFor(completion, MemoryToolName)
}

// ParseJudgement parses the judge's completion: an assess_risk call, or a
// *FormatError (also when it is a valid call of another tool).
func ParseJudgement(completion string) (ToolCall, error) {
	return parseFor(completion, JudgeToolName)
}

func parseFor(completion, want string) (ToolCall, error) {
	call, err := ParseToolCall(completion)
	if err != nil {
		return ToolCall{}, err
	}
	if call.Name != want {
		return ToolCall{}, violation("called %s, want %s", call.Name, want)
	}
	return call, nil
}

// onlyKeys checks that m has exactly the keys want.
func onlyKeys(m map[string]json.RawMessage, want ...string) error {
	for _, k := range want {
		if _, ok := m[k]; !ok {
			return fmt.Errorf("missing %q", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !slices.Contains(want, k) {
			return fmt.Errorf("unknown key %s", quote(k))
		}
	}
	return nil
}

// object decodes raw as one JSON object of the allowed keys
// (strictjson.Object), its refusal worded as a format violation's reason.
func object(raw []byte, allowed ...string) (map[string]json.RawMessage, error) {
	m, err := strictjson.Object(raw, "", allowed...)
	var e *strictjson.ObjectError
	if !errors.As(err, &e) {
		return m, err
	}
	switch e.Kind {
	case strictjson.NotObject:
		return nil, errors.New("not a JSON object")
	case strictjson.Trailing:
		return nil, errors.New("text after the JSON object")
	case strictjson.Duplicate: // at any depth: name the key itself
		return nil, fmt.Errorf("key %q repeated", e.Path[strings.LastIndexByte(e.Path, '.')+1:])
	case strictjson.Unknown:
		return nil, fmt.Errorf("unknown key %s", quote(e.Path))
	}
	return nil, errors.New(e.Problem)
}

// jsonString decodes raw, which must be a JSON string.
func jsonString(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", errors.New("is not a string")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("is not a valid string: %v", err)
	}
	return s, nil
}

// quote quotes s for an error message, cut to 40 bytes.
func quote(s string) string {
	if len(s) > 40 {
		s = strings.ToValidUTF8(s[:40], "") + "…"
	}
	return fmt.Sprintf("%q", s)
}
