package serve

import (
	"strings"
	"testing"
)

func TestParseAssess(t *testing.T) {
	req, err := ParseAssess([]byte(`{"action": {"name": "send_money", "arguments": {"to": "US1", "n": [1, {"a": 2}]}}, "observation": "ok", "user_messages": ["m1", "m2"], "step": 4}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Action.Name != "send_money" || string(req.Action.Arguments) != `{"to":"US1","n":[1,{"a":2}]}` || *req.Observation != "ok" ||
		len(req.UserMessages) != 2 || *req.Step != 4 {
		t.Errorf("%+v", req)
	}
	// Absent arguments are {}; null fields are absent.
	req, err = ParseAssess([]byte(`{"action": {"name": "f"}, "observation": null, "user_messages": null}`))
	if err != nil || string(req.Action.Arguments) != "{}" || req.Observation != nil || req.UserMessages != nil || req.Step != nil {
		t.Errorf("%+v %v", req, err)
	}
	cases := []struct{ body, code, field string }{
		{`[]`, "invalid_type", "body"},
		{`{"action": {"name": "f"}`, "invalid_json", "body"},
		{`{"action": {"name": ""}}`, "invalid_value", "action.name"},
		{`{"action": {"name": "` + strings.Repeat("n", 257) + `"}}`, "invalid_value", "action.name"},
		{`{"action": {"name": 1}}`, "invalid_type", "action.name"},
		{`{"action": "f"}`, "invalid_type", "action"},
		{`{"action": {"name": "f"}, "action": {"name": "g"}}`, "duplicate_key", "action"},
		{`{"action": {"name": "f", "arguments": {"a": [{"b": 1, "b": 2}]}}}`, "duplicate_key", "action.arguments.a[0].b"},
		{`{"action": {"name": "f"}, "step": -1}`, "invalid_value", "step"},
		{`{"action": {"name": "f"}, "step": 1.5}`, "invalid_value", "step"},
		{`{"action": {"name": "f"}, "Step": 1}`, "unknown_field", "Step"},
		{`{"action": {"name": "f", "arguments": {"a": ` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}}}`, "invalid_value", ""},
	}
	for _, c := range cases {
		_, err := ParseAssess([]byte(c.body))
		e, ok := isAPIError(err)
		if !ok || e.Status != 400 || e.Code != c.code || (c.field != "" && e.Field != c.field) || !strings.HasPrefix(e.Message, e.Field+": ") {
			t.Errorf("%.60s: error %+v, want code %s field %q", c.body, e, c.code, c.field)
		}
	}
}

func TestParseCreate(t *testing.T) {
	req, err := ParseCreate([]byte(`{"user_prompt": "Pay", "tools": [{"type": "function", "function": {"name": "a", "description": "d", "parameters": {"type": "object", "properties": {}}, "strict": true}}, {"name": "b"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if req.UserPrompt != "Pay" || len(req.Tools) != 2 || req.Tools[0].Name != "a" || req.Tools[0].Description != "d" ||
		string(req.Tools[0].Parameters) != `{"type":"object","properties":{}}` || req.Tools[1].Name != "b" {
		t.Errorf("%+v", req)
	}
	cases := []struct{ body, code, field string }{
		{`{}`, "missing_field", "user_prompt"},
		{`{"user_prompt": 3}`, "invalid_type", "user_prompt"},
		{`{"user_prompt": "x", "tools": {}}`, "invalid_type", "tools"},
		{`{"user_prompt": "x", "tools": [{"name": "a"}, {"name": "a"}]}`, "duplicate_tool", "tools[1].name"},
		{`{"user_prompt": "x", "tools": [{"type": "function", "function": {"name": "a", "x": 1}}]}`, "unknown_field", "tools[0].function.x"},
		{`{"user_prompt": "x", "tools": [{"type": "tool", "function": {"name": "a"}}]}`, "invalid_value", "tools[0].type"},
		{`{"user_prompt": "x", "tools": [{"name": "a", "parameters": []}]}`, "invalid_type", "tools[0].parameters"},
		{`{"user_prompt": "x", "model": "m"}`, "unknown_field", "model"},
	}
	for _, c := range cases {
		_, err := ParseCreate([]byte(c.body))
		e, ok := isAPIError(err)
		if !ok || e.Code != c.code || e.Field != c.field {
			t.Errorf("%s: error %+v, want code %s field %q", c.body, e, c.code, c.field)
		}
	}
}
