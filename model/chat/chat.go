// Package chat renders conversations with Qwen3's chat template, written in
// Go, and tokenizes them. It covers what the guard uses: a system message
// (with a list of tools declared the Qwen way), user messages, assistant
// messages with text and/or tool calls, tool responses, and the generation
// prompt, with thinking off (an empty "<think>\n\n</think>\n\n" block) or on.
// The output is byte-identical to Hugging Face's rendering of the Jinja
// template in Qwen3's tokenizer_config.json (assets/qwen3).
//
// Message content is a list of segments. Text we wrote is trusted; text that
// came from outside (agent actions, tool observations, memories written from
// them) must be put in Untrusted segments: Encode tokenizes those so that no
// added-token id ("<|im_start|>", "<tool_call>", …) can arise from them,
// while the template's own markup is tokenized normally. When no segment is
// untrusted, Encode equals tokenizer.Encode(Render(...)).
//
// Not covered: a message's reasoning_content field (reasoning written inside
// the content between <think> and </think> is handled as the template does),
// and roles other than system, user, assistant and tool, which the template
// (and Render) leaves out of the output.
package chat

import (
	"encoding/json"
	"strings"

	"github.com/mageguard/mageguard/model/tokenizer"
)

// Segment is a piece of message content and whether it may be trusted (an
// alias of tokenizer.Segment).
type Segment = tokenizer.Segment

// Trusted returns a segment of text we wrote (templates, instructions).
func Trusted(text string) Segment { return Segment{Text: text} }

// Untrusted returns a segment of text from outside: an agent action, a tool
// observation, a memory written from them.
func Untrusted(text string) Segment { return Segment{Text: text, Untrusted: true} }

// The roles of the messages Render writes.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool" // a tool response; consecutive ones share one user turn
)

// Message is one message of a conversation.
type Message struct {
	Role      string     // RoleSystem, RoleUser, RoleAssistant or RoleTool
	Content   []Segment  // the text, as trusted and untrusted segments
	ToolCalls []ToolCall // tool calls of an assistant message, in order
}

// NewMessage returns a message whose content is one trusted segment.
func NewMessage(role, text string) Message {
	return Message{Role: role, Content: []Segment{Trusted(text)}}
}

// ToolCall is a tool call of an assistant message.
type ToolCall struct {
	Name string // the tool's name, written as it is
	// Arguments is a JSON object, written the way the template's tojson
	// writes it (see Tool), or a JSON string whose content is written as it
	// is. Text that is not valid JSON is written as it is.
	Arguments json.RawMessage
	// Untrusted marks the arguments as untrusted text (e.g. a memory
	// written from observations): they are then tokenized as such.
	Untrusted bool
}

// Tool declares a function the model may call, the Qwen way: the template
// writes {"type": "function", "function": {"name": ..., "description": ...,
// "parameters": ...}} with Python's json.dumps conventions (", " and ": "
// separators, keys in the order given, non-ASCII characters unescaped,
// numbers as Python's repr). Description is left out when empty and
// Parameters when nil.
type Tool struct {
	Name        string          // the function's name
	Description string          // what the function does
	Parameters  json.RawMessage // a JSON schema of the arguments; key order is kept
}

// Options are the template's variables.
type Options struct {
	// AddGenerationPrompt ends the text with "<|im_start|>assistant\n",
	// for the model to write the next assistant message.
	AddGenerationPrompt bool
	// Thinking is the template's enable_thinking. When false (the guard's
	// setting) the generation prompt holds an empty "<think>\n\n</think>\n\n"
	// block, so the model answers without reasoning.
	Thinking bool
}

// Render returns the conversation as Qwen3's chat template writes it.
func Render(msgs []Message, tools []Tool, opts Options) string {
	var b strings.Builder
	for _, s := range RenderSegments(msgs, tools, opts) {
		b.WriteString(s.Text)
	}
	return b.String()
}

// Encode returns the token ids of the rendered conversation: the template's
// text and trusted content are tokenized as trusted text (added tokens
// matched), untrusted segments so that they never yield added-token ids
// (see tokenizer.EncodeSegments). No untrusted segment: the result equals
// tok.Encode(Render(msgs, tools, opts)).
//
// The ids of a conversation's first messages are a prefix of the ids of the
// whole conversation (each turn ends with <|im_end|>, which cuts
// tokenization), so a shared system prompt can be cached.
func Encode(tok *tokenizer.Tokenizer, msgs []Message, tools []Tool, opts Options) []int {
	return tok.EncodeSegments(RenderSegments(msgs, tools, opts))
}

// ToolCallText returns a tool call as the template writes it in an assistant
// message: "<tool_call>\n{\"name\": ..., \"arguments\": ...}\n</tool_call>".
func ToolCallText(tc ToolCall) string {
	return "<tool_call>\n{\"name\": \"" + tc.Name + "\", \"arguments\": " + argumentsText(tc.Arguments) + "}\n</tool_call>"
}

// RenderSegments returns the rendered conversation as segments: the
// template's text as trusted segments, interleaved with the messages'
// content segments. Render and Encode are built on it.
func RenderSegments(msgs []Message, tools []Tool, opts Options) []Segment {
	var out output
	firstIsSystem := len(msgs) > 0 && msgs[0].Role == RoleSystem

	if len(tools) > 0 {
		out.trusted("<|im_start|>system\n")
		if firstIsSystem {
			out.content(msgs[0].Content)
			out.trusted("\n\n")
		}
		out.trusted("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>")
		for _, t := range tools {
			out.trusted("\n" + toolJSON(t))
		}
		out.trusted("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n")
	} else if firstIsSystem {
		out.trusted("<|im_start|>system\n")
		out.content(msgs[0].Content)
		out.trusted("<|im_end|>\n")
	}

	// The last user query: the last user message that is not a tool
	// response wrapped by hand. Assistant messages after it get a think
	// block.
	lastQuery := len(msgs) - 1
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleUser {
			text := joinText(msgs[i].Content)
			if !(strings.HasPrefix(text, "<tool_response>") && strings.HasSuffix(text, "</tool_response>")) {
				lastQuery = i
				break
			}
		}
	}

	for i, m := range msgs {
		last := i == len(msgs)-1
		switch {
		case m.Role == RoleUser || m.Role == RoleSystem && i > 0:
			out.trusted("<|im_start|>" + m.Role + "\n")
			out.content(m.Content)
			out.trusted("<|im_end|>\n")

		case m.Role == RoleAssistant:
			content, reasoning := splitThink(m.Content)
			if i > lastQuery && (last || !isEmpty(reasoning)) {
				out.trusted("<|im_start|>assistant\n<think>\n")
				out.content(trim(reasoning, true, true))
				out.trusted("\n</think>\n\n")
				out.content(trim(content, true, false))
			} else {
				out.trusted("<|im_start|>assistant\n")
				out.content(content)
			}
			for j, tc := range m.ToolCalls {
				if j > 0 || !isEmpty(content) {
					out.trusted("\n")
				}
				out.trusted("<tool_call>\n{\"name\": \"" + tc.Name + "\", \"arguments\": ")
				out.content([]Segment{{Text: argumentsText(tc.Arguments), Untrusted: tc.Untrusted}})
				out.trusted("}\n</tool_call>")
			}
			out.trusted("<|im_end|>\n")

		case m.Role == RoleTool:
			if i == 0 || msgs[i-1].Role != RoleTool {
				out.trusted("<|im_start|>user")
			}
			out.trusted("\n<tool_response>\n")
			out.content(m.Content)
			out.trusted("\n</tool_response>")
			if last || msgs[i+1].Role != RoleTool {
				out.trusted("<|im_end|>\n")
			}
		}
	}

	if opts.AddGenerationPrompt {
		out.trusted("<|im_start|>assistant\n")
		if !opts.Thinking {
			out.trusted("<think>\n\n</think>\n\n")
		}
	}
	return out.segs
}

// output collects segments, merging neighbors of the same trust.
type output struct{ segs []Segment }

func (o *output) add(s Segment) {
	if s.Text == "" {
		return
	}
	if n := len(o.segs); n > 0 && o.segs[n-1].Untrusted == s.Untrusted {
		o.segs[n-1].Text += s.Text
		return
	}
	o.segs = append(o.segs, s)
}

func (o *output) trusted(text string) { o.add(Segment{Text: text}) }

func (o *output) content(c []Segment) {
	for _, s := range c {
		o.add(s)
	}
}

// toolJSON writes a tool declaration as the template's `tool | tojson`.
func toolJSON(t Tool) string {
	var b strings.Builder
	b.WriteString(`{"type": "function", "function": {"name": `)
	writeString(&b, t.Name)
	if t.Description != "" {
		b.WriteString(`, "description": `)
		writeString(&b, t.Description)
	}
	if t.Parameters != nil {
		b.WriteString(`, "parameters": `)
		p, err := pyJSON(t.Parameters)
		if err != nil {
			p = string(t.Parameters)
		}
		b.WriteString(p)
	}
	b.WriteString("}}")
	return b.String()
}

// argumentsText writes tool-call arguments as the template does: a string
// as it is, anything else through tojson.
func argumentsText(raw json.RawMessage) string {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s
	}
	text, err := pyJSON(raw)
	if err != nil {
		return string(raw)
	}
	return text
}

// joinText returns the text of a list of segments.
func joinText(c []Segment) string {
	var b strings.Builder
	for _, s := range c {
		b.WriteString(s.Text)
	}
	return b.String()
}

func isEmpty(c []Segment) bool {
	for _, s := range c {
		if s.Text != "" {
			return false
		}
	}
	return true
}

// slice returns the segments covering bytes [lo, hi) of joinText(c).
func slice(c []Segment, lo, hi int) []Segment {
	var out []Segment
	pos := 0
	for _, s := range c {
		start, end := pos, pos+len(s.Text)
		pos = end
		a, b := max(lo, start), min(hi, end)
		if a < b {
			out = append(out, Segment{Text: s.Text[a-start : b-start], Untrusted: s.Untrusted})
		}
	}
	return out
}

// trim strips newlines from the left and/or right of c, like Python's
// lstrip('\n') / rstrip('\n').
func trim(c []Segment, left, right bool) []Segment {
	text := joinText(c)
	lo, hi := 0, len(text)
	if left {
		lo = len(text) - len(strings.TrimLeft(text, "\n"))
	}
	if right {
		hi = len(strings.TrimRight(text, "\n"))
	}
	if lo > hi {
		lo = hi
	}
	return slice(c, lo, hi)
}

// splitThink splits an assistant message's content as the template does
// when it holds "</think>": the content is what follows the last
// "</think>" (leading newlines removed), the reasoning what precedes the
// first one, after the last "<think>" (newlines around it removed).
func splitThink(c []Segment) (content, reasoning []Segment) {
	text := joinText(c)
	if !strings.Contains(text, "</think>") {
		return c, nil
	}
	content = trim(slice(c, strings.LastIndex(text, "</think>")+len("</think>"), len(text)), true, false)
	before := trim(slice(c, 0, strings.Index(text, "</think>")), false, true)
	beforeText := joinText(before)
	start := 0
	if k := strings.LastIndex(beforeText, "<think>"); k >= 0 {
		start = k + len("<think>")
	}
	reasoning = trim(slice(before, start, len(beforeText)), true, false)
	return content, reasoning
}
