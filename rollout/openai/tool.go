package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mageguard/mageguard/internal/strictjson"
)

// CallTool sends one chat request to /chat/completions (whatever
// remote_api says: vLLM, SGLang and OpenAI all serve it) with a system and
// a user message and the function tool named tool (its parameters a JSON
// schema) forced by tool_choice, greedy (temperature 0, seed 0), at most
// maxTokens new tokens; it returns the arguments of the one call the
// model made, as a JSON object. Retries and timeouts are those of every
// request (remote_retries, remote_timeout_s). `data label` asks its judge
// through it.
func (g *Generator) CallTool(ctx context.Context, system, user, tool string, parameters json.RawMessage, maxTokens int) (json.RawMessage, error) {
	ct := chatTool{Type: "function", Function: chatFunction{Name: tool, Parameters: parameters}}
	body := chatRequest{
		Model:               g.cfg.RemoteModel,
		Messages:            []chatMessage{{Role: "system", Content: system}, {Role: "user", Content: user}},
		Tools:               []chatTool{ct},
		ToolChoice:          chatTool{Type: "function", Function: chatFunction{Name: tool}},
		MaxCompletionTokens: maxTokens,
		Temperature:         0, TopP: 1, Seed: 0,
	}
	var resp chatResponse
	if err := g.post(ctx, "/chat/completions", body, &resp); err != nil {
		return nil, err
	}
	if len(resp.Choices) != 1 {
		return nil, fmt.Errorf("the server returned %d choices, want 1", len(resp.Choices))
	}
	calls := resp.Choices[0].Message.ToolCalls
	if len(calls) != 1 || calls[0].Function.Name != tool {
		names := make([]string, len(calls))
		for i, c := range calls {
			names[i] = fmt.Sprintf("%q", c.Function.Name)
		}
		return nil, fmt.Errorf("the model made %d tool calls [%s], want one call of %q", len(calls), strings.Join(names, ", "), tool)
	}
	// OpenAI sends the arguments as a JSON string; some servers as the object.
	raw := calls[0].Function.Arguments
	if strictjson.ValueKind(raw) == "a string" {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("the call's arguments: %v", err)
		}
		raw = json.RawMessage(s)
	}
	if strictjson.ValueKind(raw) != "an object" || !json.Valid(raw) {
		return nil, fmt.Errorf("the call's arguments are not a JSON object: %.200s", raw)
	}
	return raw, nil
}
