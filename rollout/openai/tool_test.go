package openai

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mageguard/mageguard/rollout"
)

// toolGenerator is a chat generator on f, built without a tokenizer (CallTool needs none).
func toolGenerator(t *testing.T, f *fakeServer) *Generator {
	t.Helper()
	cfg := rollout.DefaultRemoteConfig()
	cfg.Generator, cfg.Endpoint, cfg.RemoteAPI, cfg.RemoteModel = rollout.GeneratorOpenAI, f.srv.URL+"/v1", rollout.RemoteChat, "judge"
	cfg.RemoteTimeoutS, cfg.RemoteRetries = 0.5, 1
	g, err := New(cfg, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	g.Backoff = time.Millisecond
	return g
}

// CallTool sends the system and user messages with the tool forced, greedy,
// to /chat/completions, and returns the call's arguments decoded from their
// JSON string; a 503 is retried.
func TestCallTool(t *testing.T) {
	f := newFakeServer(t, reply{status: 503, file: "server_error_503.json"}, reply{status: 200, file: "chat_tool_call.json"})
	g := toolGenerator(t, f)
	params := json.RawMessage(`{"type":"object"}`)
	got, err := g.CallTool(context.Background(), "sys", "usr", "assess_risk", params, 64)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"decision": "approve", "rationale": "Reading the balance is within the task."}`; string(got) != want {
		t.Errorf("arguments %s, want %s", got, want)
	}
	if f.hits() != 2 || f.paths[1] != "/v1/chat/completions" {
		t.Fatalf("requests %v", f.paths)
	}
	b := f.bodies[1]
	for k, want := range map[string]string{
		"model":                 `"judge"`,
		"messages":              `[{"role":"system","content":"sys"},{"role":"user","content":"usr"}]`,
		"tools":                 `[{"type":"function","function":{"name":"assess_risk","parameters":{"type":"object"}}}]`,
		"tool_choice":           `{"type":"function","function":{"name":"assess_risk"}}`,
		"max_completion_tokens": `64`,
		"temperature":           `0`,
	} {
		if string(b[k]) != want {
			t.Errorf("request %s = %s, want %s", k, b[k], want)
		}
	}
}

// An answer without exactly one call of the tool, or with arguments that
// are not a JSON object, is an error.
func TestCallToolRefusesOtherAnswers(t *testing.T) {
	for _, c := range []struct {
		file, tool, err string
	}{
		{"chat_tool_call.json", "verdict", `made 1 tool calls ["assess_risk"], want one call of "verdict"`},
		{"chat_no_tool_call.json", "assess_risk", "made 0 tool calls"},
		{"chat_malformed_arguments.json", "assess_risk", "not a JSON object"},
	} {
		f := newFakeServer(t, reply{status: 200, file: c.file})
		_, err := toolGenerator(t, f).CallTool(context.Background(), "s", "u", c.tool, json.RawMessage(`{}`), 16)
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: error %v, want %q", c.file, err, c.err)
		}
	}
}
