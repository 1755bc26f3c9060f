// Package prompt is what the guard's model reads and writes: the memory
// manager's and the judge's prompts (versioned templates under
// prompts/<version>/), the two tools the calls must use and the strict
// parser of those calls, and the safety of untrusted text in a prompt.
// Untrusted text (actions, observations, user messages, memories) is
// tokenized so that no added-token id can arise from it, sits in delimited
// blocks that no copy or look-alike of a delimiter in it can open or close
// (delimit.go), and is elided to a bounded number of tokens (elide.go).
// See docs/design.md#prompts-and-untrusted-text.
package prompt

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/template"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/model/chat"
	"github.com/mageguard/mageguard/model/tokenizer"
)

//go:embed prompts
var promptFiles embed.FS

// Part is a piece of a prompt's user message: our own template text
// (trusted) or text from the agent's environment — actions, observations,
// the user's request, memories written from them — which is tokenized so
// that no added-token id can arise from it.
type Part = chat.Segment

// Prompt is one guard call before the chat template: the role's system
// prompt (static, identical for every call of the role, so its KV cache can
// be shared) and the user message.
type Prompt struct {
	System string
	User   []Part
}

// Encode renders p with the chat template as a guard call: the system
// prompt declaring tools, the user message (its untrusted parts encoded so
// that no added token can arise from them) and the generation prompt with
// thinking off.
func Encode(tok *tokenizer.Tokenizer, p Prompt, tools []chat.Tool) []int {
	msgs := []chat.Message{
		chat.NewMessage(chat.RoleSystem, p.System),
		{Role: chat.RoleUser, Content: p.User},
	}
	return chat.Encode(tok, msgs, tools, chat.Options{AddGenerationPrompt: true})
}

// UserText returns the user message as plain text.
func (p Prompt) UserText() string {
	var b strings.Builder
	for _, part := range p.User {
		b.WriteString(part.Text)
	}
	return b.String()
}

// Options say which prompts NewPrompts renders: the rollout section's
// prompt keys.
type Options struct {
	Version      string // the template version: prompts/<Version>/ (rollout.prompt_version)
	TrackIntent  bool   // the memory prompt asks to keep the user's intent and task scope (rollout.track_intent)
	TrackAttacks bool   // the memory prompt asks to keep attack patterns seen (rollout.track_attacks)
	BudgetChars  int    // the memory length the prompt asks for, in characters (rollout.memory_budget_chars)
}

// Prompts renders the memory-manager and judge prompts of one template
// version with the ablation switches of its Options.
type Prompts struct {
	MemorySystem    string // the memory manager's system prompt
	JudgeSystem     string // the judge's system prompt (reads memory + action)
	JudgeOnlySystem string // the judge-only baseline's system prompt (reads the raw trajectory)
	// MemoryTool and JudgeTool are the tools the system prompts declare:
	// the package's MemoryTool and JudgeTool, or the version's own
	// declarations (tools.json; see NewPrompts).
	MemoryTool, JudgeTool chat.Tool
	// JudgeArgs is the order in which the judge writes assess_risk's
	// arguments: decision then rationale, unless the version's tools.json
	// requires them in the other order (the rationale first: the judge
	// names what it checked before it decides).
	JudgeArgs []string
}

// parseTools reads a version's tools.json: the declarations of exactly
// update_memory and assess_risk, each with parameters that declare and
// require exactly the arguments the parser requires; the order of
// assess_risk's "required" list is the order the judge writes them in.
func parseTools(src []byte) (memory, judge chat.Tool, judgeArgs []string, err error) {
	var vt versionTools
	if err := json.Unmarshal(src, &vt); err != nil {
		return memory, judge, nil, err
	}
	memory, judge = MemoryTool, JudgeTool
	if len(vt) != 2 {
		return memory, judge, nil, fmt.Errorf("want the declarations of exactly %s and %s", MemoryToolName, JudgeToolName)
	}
	for _, t := range []struct {
		tool     *chat.Tool
		required []string
	}{{&memory, []string{"content"}}, {&judge, []string{"decision", "rationale"}}} {
		d, ok := vt[t.tool.Name]
		if !ok {
			return memory, judge, nil, fmt.Errorf("want the declarations of exactly %s and %s", MemoryToolName, JudgeToolName)
		}
		var schema struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(d.Parameters, &schema); err != nil || !slices.Equal(slices.Sorted(slices.Values(schema.Required)), t.required) || len(schema.Properties) != len(t.required) {
			return memory, judge, nil, fmt.Errorf("%s: parameters must declare and require exactly %v", t.tool.Name, t.required)
		}
		for _, k := range t.required {
			if _, ok := schema.Properties[k]; !ok {
				return memory, judge, nil, fmt.Errorf("%s: parameters must declare and require exactly %v", t.tool.Name, t.required)
			}
		}
		t.tool.Description, t.tool.Parameters = d.Description, d.Parameters
		if t.tool.Name == JudgeToolName {
			judgeArgs = schema.Required
		}
	}
	return memory, judge, judgeArgs, nil
}

// versionTools is a version's tools.json: the declarations of the two
// tools (description and JSON-schema parameters), by tool name. The names,
// and so the calls the parser accepts, stay the same.
type versionTools map[string]struct {
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// NewPrompts renders the system prompts of version o.Version. A version
// may also declare its tools in tools.json (e.g. shorter descriptions, for
// a small model's context): {"update_memory": {"description": ...,
// "parameters": {...}}, "assess_risk": {...}}, both tools, with the
// parameters each requires, in assess_risk's case in the order the judge
// writes them (Prompts.JudgeArgs); without the file the package's
// MemoryTool and JudgeTool are declared, decision first.
func NewPrompts(o Options) (*Prompts, error) {
	vars := struct {
		TrackIntent, TrackAttacks bool
		BudgetChars               int
	}{o.TrackIntent, o.TrackAttacks, o.BudgetChars}
	render := func(name string) (string, error) {
		path := "prompts/" + o.Version + "/" + name
		src, err := promptFiles.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("prompt_version %q: %w", o.Version, err)
		}
		t, err := template.New(name).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return "", fmt.Errorf("prompt %s: %w", path, err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, vars); err != nil {
			return "", fmt.Errorf("prompt %s: %w", path, err)
		}
		return strings.TrimSpace(b.String()), nil
	}
	var p Prompts
	var err error
	if p.MemorySystem, err = render("memory.tmpl"); err != nil {
		return nil, err
	}
	if p.JudgeSystem, err = render("judge.tmpl"); err != nil {
		return nil, err
	}
	if p.JudgeOnlySystem, err = render("judge_only.tmpl"); err != nil {
		return nil, err
	}
	p.MemoryTool, p.JudgeTool, p.JudgeArgs = MemoryTool, JudgeTool, defaultJudgeArgs
	path := "prompts/" + o.Version + "/tools.json"
	if src, err := promptFiles.ReadFile(path); err == nil {
		if p.MemoryTool, p.JudgeTool, p.JudgeArgs, err = parseTools(src); err != nil {
			return nil, fmt.Errorf("prompt %s: %w", path, err)
		}
	}
	return &p, nil
}

// ActionJSON renders an action as the agent's tool call:
// {"name": ..., "arguments": {...}} with the arguments exactly as recorded.
func ActionJSON(a dataset.Action) string {
	name, _ := json.Marshal(a.Name)
	args := a.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	return `{"name": ` + string(name) + `, "arguments": ` + string(args) + `}`
}

// ToolsText renders the agent's tool list for the memory: one JSON object
// a line, {"name", "description", "parameters"} (no HTML escaping; empty
// fields left out).
func ToolsText(tools []dataset.Tool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, t := range tools {
		enc.Encode(t) // cannot fail: strings and a JSON object
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func trusted(s string) Part   { return chat.Trusted(s) }
func untrusted(s string) Part { return chat.Untrusted(s) }

// block wraps untrusted text in a delimited block: <tag>\ntext\n</tag>\n.
// The delimiters are ordinary text, so a copy of one inside the untrusted
// text — or a look-alike a model would read as one — could open or close
// a block: such copies are written with &lt; and &gt; instead
// (escapeDelimiters, delimit.go).
func block(tag, text string) []Part {
	return []Part{trusted("<" + tag + ">\n"), untrusted(escapeDelimiters(text)), trusted("\n</" + tag + ">\n")}
}

// Event is one thing that happened in the agent's trajectory: a user
// message, or an action with its observation.
type Event struct {
	User        *string         // a user message (the request, or a later message)
	Action      *dataset.Action // an action (when User is nil)
	Observation string          // the action's observation
	// Tools is the agent's tool list as ToolsText renders it (elided as an
	// observation), when User and Action are nil: shown as a tool result
	// is, since the tools' servers write the descriptions.
	Tools *string
}

// Events are what happened since the memory's last update, in order: at a
// window's start the user's request (and the action just before the window),
// later the previous action with its observation, and any new user message.
type Events []Event

// Memory is the memory manager's prompt: the previous memory and the new events.
func (p *Prompts) Memory(prev string, ev Events) Prompt {
	var u []Part
	u = append(u, trusted("Current memory:\n"))
	if prev == "" {
		u = append(u, trusted("<memory>\n(empty)\n</memory>\n"))
	} else {
		u = append(u, block("memory", prev)...)
	}
	u = append(u, trusted("\nNew events since the last update:\n"))
	for _, e := range ev {
		if e.User != nil {
			u = append(u, block("user_request", *e.User)...)
		} else if e.Tools != nil {
			// In an observation block: the delimiting, escaping and system
			// prompt's rule (data, never instructions) of a tool result.
			u = append(u, trusted("The tools the agent was shown (their servers wrote these definitions):\n"))
			u = append(u, block("observation", *e.Tools)...)
		} else {
			u = append(u, block("action", ActionJSON(*e.Action))...)
			u = append(u, block("observation", e.Observation)...)
		}
	}
	if len(ev) == 0 {
		u = append(u, trusted("(none)\n"))
	}
	u = append(u, trusted("\nUpdate the memory with one update_memory call."))
	return Prompt{System: p.MemorySystem, User: u}
}

// Judge is the judge's prompt: the memory and the pending action only.
func (p *Prompts) Judge(memory string, pending dataset.Action) Prompt {
	var u []Part
	u = append(u, trusted("Memory:\n"))
	if memory == "" {
		u = append(u, trusted("<memory>\n(empty)\n</memory>\n"))
	} else {
		u = append(u, block("memory", memory)...)
	}
	u = append(u, trusted("\nPending tool call:\n"))
	u = append(u, block("action", ActionJSON(pending))...)
	u = append(u, trusted("\nAssess the risk of the pending tool call with one assess_risk call."))
	return Prompt{System: p.JudgeSystem, User: u}
}

// HistoryStep is one earlier step of a raw trajectory for the judge-only
// baseline: an optional user message, then an action and its observation.
type HistoryStep struct {
	UserRequest *string
	Action      dataset.Action
	Observation string
}

// JudgeOnly is the judge-only baseline's prompt: the user's request, every
// earlier action with its observation, and the pending action. Its length
// grows with the trajectory: O(T) per call, O(T²) per task.
func (p *Prompts) JudgeOnly(userRequest string, history []HistoryStep, pendingUser *string, pending dataset.Action) Prompt {
	var u []Part
	u = append(u, block("user_request", userRequest)...)
	for i, h := range history {
		if h.UserRequest != nil {
			u = append(u, block("user_request", *h.UserRequest)...)
		}
		u = append(u, trusted(fmt.Sprintf("\nStep %d:\n", i+1)))
		u = append(u, block("action", ActionJSON(h.Action))...)
		u = append(u, block("observation", h.Observation)...)
	}
	if pendingUser != nil {
		u = append(u, block("user_request", *pendingUser)...)
	}
	u = append(u, trusted("\nPending tool call:\n"))
	u = append(u, block("action", ActionJSON(pending))...)
	u = append(u, trusted("\nAssess the risk of the pending tool call with one assess_risk call."))
	return Prompt{System: p.JudgeOnlySystem, User: u}
}
