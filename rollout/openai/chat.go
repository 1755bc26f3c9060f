package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/mageguard/mageguard/model/chat"
	"github.com/mageguard/mageguard/rollout/generate"
)

// chatRequest is the body of POST /chat/completions.
type chatRequest struct {
	Model               string        `json:"model"`
	Messages            []chatMessage `json:"messages"`
	Tools               []chatTool    `json:"tools"`
	ToolChoice          chatTool      `json:"tool_choice"`
	MaxCompletionTokens int           `json:"max_completion_tokens"`
	Temperature         float64       `json:"temperature"`
	TopP                float64       `json:"top_p"`
	Seed                int64         `json:"seed"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// chatResponse is what this generator reads of a /chat/completions answer.
type chatResponse struct {
	Choices []struct {
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Function struct {
					Name      string          `json:"name"`
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
	Usage *generate.Usage `json:"usage"`
}

// chat runs one request on /chat/completions.
func (g *Generator) chat(ctx context.Context, r *generate.Request, s generate.Sampling, seed int64) (generate.Completion, error) {
	if r.Chat == nil {
		return generate.Completion{}, errors.New("remote_api chat: the request carries no chat messages")
	}
	temp, topP, _ := sampling(s)
	tool := chatTool{Type: "function", Function: chatFunction{
		Name: r.Chat.Tool.Name, Description: r.Chat.Tool.Description, Parameters: r.Chat.Tool.Parameters}}
	body := chatRequest{
		Model: g.modelName(),
		Messages: []chatMessage{
			{Role: "system", Content: r.Chat.System},
			{Role: "user", Content: r.Chat.User},
		},
		Tools:               []chatTool{tool},
		ToolChoice:          chatTool{Type: "function", Function: chatFunction{Name: tool.Function.Name}},
		MaxCompletionTokens: r.MaxNew,
		Temperature:         temp, TopP: topP, Seed: seed,
	}
	var resp chatResponse
	if err := g.post(ctx, "/chat/completions", body, &resp); err != nil {
		return generate.Completion{}, err
	}
	if len(resp.Choices) != 1 {
		return generate.Completion{}, fmt.Errorf("the server returned %d choices, want 1", len(resp.Choices))
	}
	msg := resp.Choices[0].Message
	// The tool calls written back as Qwen3 writes them, for our parser: a
	// malformed arguments string stays malformed (a format violation), two
	// calls stay two, no call leaves the text content (a violation unless
	// it holds a valid call).
	var text strings.Builder
	for _, tc := range msg.ToolCalls {
		text.WriteString(chat.ToolCallText(chat.ToolCall{Name: tc.Function.Name, Arguments: tc.Function.Arguments}))
	}
	if len(msg.ToolCalls) == 0 && msg.Content != nil {
		text.WriteString(*msg.Content)
	}
	return generate.Completion{Text: text.String(), Usage: resp.Usage}, nil
}
