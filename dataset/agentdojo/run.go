// Package agentdojo converts AgentDojo run logs into mageguard trajectories
// and labels every action with rules kept as data (rules/agentdojo.yaml).
//
// The layout and format of the logs (docs/data.md, "AgentDojo import and
// labels"):
// runs/<model>/<suite>/<user_task>/<attack>/<injection_task>.json, one run a
// file, messages in the OpenAI style with content either a string or (the
// Llama-3.3 runs of benchmark v1.2.1) a list of {"type": "text", "content"}
// blocks.
//
// Conversion of one run:
//   - every tool call of an assistant message is one action, in order; its
//     observation is the tool message answering it (matched by tool_call_id,
//     else the next unanswered call in order); "ERROR: <error>" when the tool
//     failed; "" when no tool message answers it (the run ended first);
//   - function tags written in an assistant's text (malformed Llama calls that
//     were never executed) are not actions: only tool_calls are;
//   - the arguments are the call's args as recorded (placeholder_args, the
//     benchmark's ground-truth placeholders, are ignored);
//   - the user prompt is the first user message; a later user message becomes
//     turns[t].user of the next action;
//   - utility is the run's utility; security the run's security for attack
//     runs and null for benign ones (the benchmark writes true there);
//   - the tools the agent was shown, when the log lists them, become the
//     trajectory's tools;
//   - sanity runs (an injection task given as the user task) are skipped.
package agentdojo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Run is one AgentDojo run log (the fields the importer reads).
type Run struct {
	SuiteName       string            `json:"suite_name"`
	PipelineName    string            `json:"pipeline_name"`
	UserTaskID      string            `json:"user_task_id"`
	InjectionTaskID *string           `json:"injection_task_id"`
	AttackType      *string           `json:"attack_type"`
	Injections      map[string]string `json:"injections"`
	Messages        []Message         `json:"messages"`
	Utility         *bool             `json:"utility"`
	Security        *bool             `json:"security"`
	// Tools are the functions the agent was shown, when the log has them
	// (the logs data/agentdojo-mini was made from do not): {name, description,
	// parameters}, or the same under "function" (OpenAI's form).
	Tools []RunTool `json:"tools"`
}

// RunTool is one function of a run's tool list.
type RunTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Function    *RunTool        `json:"function"`
}

// Message is one chat message of a run.
type Message struct {
	Role       string     `json:"role"`
	Content    Content    `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls"`
	ToolCallID *string    `json:"tool_call_id"`
	Error      *string    `json:"error"`
}

// ToolCall is one function call of an assistant message.
type ToolCall struct {
	Function        string          `json:"function"`
	Args            json.RawMessage `json:"args"`
	ID              *string         `json:"id"`
	PlaceholderArgs json.RawMessage `json:"placeholder_args"`
}

// Content is a message's text: a JSON string, null, or a list of content
// blocks of which the "text" blocks count (joined with newlines, as AgentDojo
// does).
type Content struct {
	Text string
}

// UnmarshalJSON accepts a string, null, or a list of {"type", "content"} blocks.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		c.Text = ""
		return nil
	case b[0] == '"':
		return json.Unmarshal(b, &c.Text)
	case b[0] == '[':
		var blocks []struct {
			Type    string  `json:"type"`
			Content *string `json:"content"`
		}
		if err := json.Unmarshal(b, &blocks); err != nil {
			return fmt.Errorf("content blocks: %w", err)
		}
		var parts []string
		for _, bl := range blocks {
			if bl.Type == "text" && bl.Content != nil {
				parts = append(parts, *bl.Content)
			}
		}
		c.Text = strings.Join(parts, "\n")
		return nil
	}
	return fmt.Errorf("content: want a string, null or a list of blocks, got %.20s", b)
}

// ParseRun decodes one run log.
func ParseRun(b []byte) (*Run, error) {
	var r Run
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
