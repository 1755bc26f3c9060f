package serve

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/mageguard/mageguard/internal/strictjson"
)

// FuzzParseRequest: any body through the decoders of assess and create is
// accepted or refused with a 400 whose message is bounded (a key in a path
// is cut at 64 bytes, so at most 64 levels of them); what is accepted is
// valid text, its action a named tool with arguments that are one JSON
// object with no key twice.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"action": {"name": "send_money", "arguments": {"to": "US1", "n": [1, {"a": 2}]}}, "observation": "ok", "user_messages": ["m"], "step": 4}`,
		`{"action": {"name": "f", "arguments": {"a": [{"b": 1, "b": 2}]}}}`,
		`{"action": {"name": "f"}, "observation": "\ud800"}`,
		"{\"action\": {\"name\": \"f\", \"arguments\": {\"to\": \"\xff\"}}}",
		`{"user_prompt": "Pay", "tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}, {"name": "b"}]}`,
		`{"user_prompt": "x", "` + strings.Repeat("k", 300) + `": 1}`,
		`{"action": {"name": "f"}} {}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		refused := func(err error) {
			e, ok := isAPIError(err)
			if !ok || e.Status != 400 || e.Code == "" || len(e.Message) > 8192 {
				t.Fatalf("refusal %T %v", err, err)
			}
		}
		if req, err := ParseAssess(b); err != nil {
			refused(err)
		} else {
			if req.Action.Name == "" || len(req.Action.Name) > 256 || !utf8.ValidString(req.Action.Name) {
				t.Fatalf("accepted the action name %q", req.Action.Name)
			}
			if !json.Valid(req.Action.Arguments) || req.Action.Arguments[0] != '{' {
				t.Fatalf("accepted the arguments %q", req.Action.Arguments)
			}
			if path, problem, ok := strictjson.Check(req.Action.Arguments); !ok {
				t.Fatalf("accepted arguments with %s: %s", path, problem)
			}
			if req.Observation != nil && !utf8.ValidString(*req.Observation) {
				t.Fatalf("accepted the observation %q", *req.Observation)
			}
			for _, m := range req.UserMessages {
				if !utf8.ValidString(m) {
					t.Fatalf("accepted the user message %q", m)
				}
			}
		}
		if req, err := ParseCreate(b); err != nil {
			refused(err)
		} else if strings.TrimSpace(req.UserPrompt) == "" || !utf8.ValidString(req.UserPrompt) {
			t.Fatalf("accepted the user prompt %q", req.UserPrompt)
		}
	})
}
