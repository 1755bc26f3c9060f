package prompt

import (
	"errors"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/model/chat"
)

// TestToolDeclarations checks how the two tools appear in a system prompt
// against Python's json.dumps(tool, ensure_ascii=False) of the same dicts
// (what the Hugging Face template writes), pasted here.
func TestToolDeclarations(t *testing.T) {
	want := []string{
		"{\"type\": \"function\", \"function\": {\"name\": \"update_memory\", \"description\": \"Replace the shadow memory with an updated one: a compact, security-focused record of the agent's trajectory so far (the user's intent, attack patterns seen, security-relevant facts).\", \"parameters\": {\"type\": \"object\", \"properties\": {\"content\": {\"type\": \"string\", \"description\": \"The complete updated memory. It replaces the previous memory.\"}}, \"required\": [\"content\"]}}}",
		"{\"type\": \"function\", \"function\": {\"name\": \"assess_risk\", \"description\": \"Decide whether the agent's pending action may run.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"decision\": {\"type\": \"string\", \"enum\": [\"approve\", \"reject\"], \"description\": \"approve lets the action run; reject blocks it.\"}, \"rationale\": {\"type\": \"string\", \"description\": \"A short justification of the decision.\"}}, \"required\": [\"decision\", \"rationale\"]}}}",
	}
	text := chat.Render(nil, []chat.Tool{MemoryTool, JudgeTool}, chat.Options{})
	if !strings.Contains(text, "<tools>\n"+want[0]+"\n"+want[1]+"\n</tools>") {
		t.Errorf("tool declarations in\n%s\nwant\n%s\n%s", text, want[0], want[1])
	}
}

func TestParseToolCall(t *testing.T) {
	memory := ToolCall{Name: MemoryToolName, Content: "User wants to pay the March bill only."}
	reject := ToolCall{Name: JudgeToolName, Decision: DecisionReject, Rationale: "Exposure exceeds the 10% limit."}
	valid := []struct {
		name, in string
		want     ToolCall
	}{
		// The tool call of model/chat/testdata/case_f_sft_tool_call_target.json, as the Hugging Face template rendered it.
		{"reference rendering", "<tool_call>\n{\"name\": \"assess_risk\", \"arguments\": {\"decision\": \"reject\", \"rationale\": \"Exposure exceeds the 10% limit.\"}}\n</tool_call><|im_end|>\n", reject},
		{"compact, endoftext", `<tool_call>{"name":"update_memory","arguments":{"content":"User wants to pay the March bill only."}}</tool_call><|endoftext|>`, memory},
		{"keys in any order, whitespace around", "  \n<tool_call>\n{\"arguments\": {\"rationale\": \"Exposure exceeds the 10% limit.\", \"decision\": \"reject\"}, \"name\": \"assess_risk\"}\n</tool_call>\n\n", reject},
		{"escapes and unicode", `<tool_call>{"name": "update_memory", "arguments": {"content": "a\n\"b\" \u00e9 é <|im_end|>"}}</tool_call>`, ToolCall{Name: MemoryToolName, Content: "a\n\"b\" é é <|im_end|>"}},
		{"empty values", `<tool_call>{"name": "assess_risk", "arguments": {"decision": "approve", "rationale": ""}}</tool_call>`, ToolCall{Name: JudgeToolName, Decision: DecisionApprove}},
	}
	for _, c := range valid {
		got, err := ParseToolCall(c.in)
		if err != nil || got != c.want {
			t.Errorf("%s: ParseToolCall = %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}

	invalid := []struct{ name, in, reason string }{
		{"empty", "", "no <tool_call> block"},
		{"plain text", "I approve this action.", "no <tool_call> block"},
		{"text before", "Sure! <tool_call>{\"name\": \"assess_risk\", \"arguments\": {\"decision\": \"approve\", \"rationale\": \"ok\"}}</tool_call>", "text before <tool_call>"},
		{"think block before", "<think>\nok\n</think>\n\n<tool_call>{}</tool_call>", "text before <tool_call>"},
		{"text after", "<tool_call>{\"name\": \"assess_risk\", \"arguments\": {\"decision\": \"approve\", \"rationale\": \"ok\"}}</tool_call> done", "text after </tool_call>"},
		{"text after im_end", "<tool_call>{}</tool_call><|im_end|>x", "text after </tool_call>"},
		{"two terminators", "<tool_call>{}</tool_call><|im_end|><|im_end|>", "text after </tool_call>"},
		{"two blocks", "<tool_call>{}</tool_call>\n<tool_call>{}</tool_call>", "2 <tool_call> blocks"},
		{"not closed", "<tool_call>{\"name\": \"assess_risk\"}", "not closed"},
		{"closing tag inside", "<tool_call>{\"name\": \"</tool_call>\"}</tool_call>", "text after </tool_call>"},
		{"not JSON", "<tool_call>name=assess_risk</tool_call>", "not valid JSON"},
		{"not an object", "<tool_call>[\"assess_risk\"]</tool_call>", "not a JSON object"},
		{"trailing JSON", `<tool_call>{"name": "update_memory", "arguments": {"content": "x"}} {}</tool_call>`, "text after the JSON object"},
		{"missing name", `<tool_call>{"arguments": {"content": "x"}}</tool_call>`, `missing "name"`},
		{"missing arguments", `<tool_call>{"name": "update_memory"}</tool_call>`, `missing "arguments"`},
		{"extra top-level key", `<tool_call>{"name": "update_memory", "arguments": {"content": "x"}, "id": 1}</tool_call>`, `unknown key "id"`},
		{"name not a string", `<tool_call>{"name": 7, "arguments": {"content": "x"}}</tool_call>`, `"name" is not a string`},
		{"unknown tool", `<tool_call>{"name": "send_money", "arguments": {"content": "x"}}</tool_call>`, `unknown tool "send_money"`},
		{"arguments as a string", `<tool_call>{"name": "update_memory", "arguments": "{\"content\": \"x\"}"}</tool_call>`, "not a JSON object"},
		{"missing argument", `<tool_call>{"name": "assess_risk", "arguments": {"decision": "reject"}}</tool_call>`, `missing "rationale"`},
		{"extra argument", `<tool_call>{"name": "update_memory", "arguments": {"content": "x", "priority": "high"}}</tool_call>`, `unknown key "priority"`},
		{"argument not a string", `<tool_call>{"name": "update_memory", "arguments": {"content": null}}</tool_call>`, `argument "content" is not a string`},
		{"decision not in the enum", `<tool_call>{"name": "assess_risk", "arguments": {"decision": "Approve", "rationale": "ok"}}</tool_call>`, `decision "Approve" is neither`},
		{"repeated decision", `<tool_call>{"name": "assess_risk", "arguments": {"decision": "approve", "decision": "reject", "rationale": "ok"}}</tool_call>`, `key "decision" repeated`},
		{"repeated name", `<tool_call>{"name": "assess_risk", "name": "update_memory", "arguments": {"content": "x"}}</tool_call>`, `key "name" repeated`},
	}
	for _, c := range invalid {
		got, err := ParseToolCall(c.in)
		var fe *FormatError
		if !errors.As(err, &fe) {
			t.Errorf("%s: ParseToolCall = %+v, %v; want a format violation", c.name, got, err)
			continue
		}
		if !strings.Contains(fe.Reason, c.reason) {
			t.Errorf("%s: reason %q does not say %q", c.name, fe.Reason, c.reason)
		}
		if got != (ToolCall{}) {
			t.Errorf("%s: a violation returned a non-empty call %+v", c.name, got)
		}
	}
}

func TestParseForRole(t *testing.T) {
	mem := ToolCall{Name: MemoryToolName, Content: "m"}.Text()
	judge := ToolCall{Name: JudgeToolName, Decision: DecisionApprove, Rationale: "r"}.Text()
	if c, err := ParseMemory(mem); err != nil || c.Content != "m" {
		t.Errorf("ParseMemory(memory call) = %+v, %v", c, err)
	}
	if c, err := ParseJudgement(judge); err != nil || c.Decision != DecisionApprove || c.Rationale != "r" {
		t.Errorf("ParseJudgement(judge call) = %+v, %v", c, err)
	}
	var fe *FormatError
	if _, err := ParseMemory(judge); !errors.As(err, &fe) || !strings.Contains(fe.Reason, "called assess_risk, want update_memory") {
		t.Errorf("ParseMemory(judge call) error = %v", err)
	}
	if _, err := ParseJudgement(mem); !errors.As(err, &fe) || !strings.Contains(fe.Reason, "called update_memory, want assess_risk") {
		t.Errorf("ParseJudgement(memory call) error = %v", err)
	}
}

// TestToolCallText checks Text against the reference rendering of
// model/chat/testdata/case_f_sft_tool_call_target.json (Hugging Face's template) and the same
// rendering by the chat package for a memory call with characters that
// Go's encoding/json would escape differently from Python.
func TestToolCallText(t *testing.T) {
	reject := ToolCall{Name: JudgeToolName, Decision: DecisionReject, Rationale: "Exposure exceeds the 10% limit."}
	want := "<tool_call>\n{\"name\": \"assess_risk\", \"arguments\": {\"decision\": \"reject\", \"rationale\": \"Exposure exceeds the 10% limit.\"}}\n</tool_call>"
	if got := reject.Text(); got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
	mem := ToolCall{Name: MemoryToolName, Content: "<b>&é\n"}
	want = "<tool_call>\n{\"name\": \"update_memory\", \"arguments\": {\"content\": \"<b>&é\\n\"}}\n</tool_call>"
	if got := mem.Text(); got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}

// FuzzParseToolCall shows that the parser never panics, that whatever it
// accepts is a call of a known tool with a valid decision, and that an
// accepted call written back with Text parses to the same call.
//
//	go test -run '^$' -fuzz FuzzParseToolCall -fuzztime 1m ./rollout/prompt
func FuzzParseToolCall(f *testing.F) {
	// More seeds are in testdata/fuzz/FuzzParseToolCall.
	f.Add(ToolCall{Name: JudgeToolName, Decision: DecisionReject, Rationale: "r"}.Text() + "<|im_end|>")
	f.Add(ToolCall{Name: MemoryToolName, Content: "c"}.Text())
	f.Fuzz(func(t *testing.T, completion string) {
		call, err := ParseToolCall(completion)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || fe.Reason == "" {
				t.Fatalf("error %v is not a format violation with a reason", err)
			}
			return
		}
		switch call.Name {
		case MemoryToolName:
			if call.Decision != "" || call.Rationale != "" {
				t.Fatalf("memory call with judge fields: %+v", call)
			}
		case JudgeToolName:
			if call.Decision != DecisionApprove && call.Decision != DecisionReject || call.Content != "" {
				t.Fatalf("bad judge call: %+v", call)
			}
		default:
			t.Fatalf("accepted unknown tool %q", call.Name)
		}
		// Decoded values may hold the tags (written as JSON escapes); those
		// cannot be written back raw.
		for _, v := range []string{call.Content, call.Rationale} {
			if strings.Contains(v, "<tool_call>") || strings.Contains(v, "</tool_call>") {
				return
			}
		}
		again, err := ParseToolCall(call.Text())
		if err != nil || again != call {
			t.Fatalf("Text round trip: %+v -> %q -> %+v, %v", call, call.Text(), again, err)
		}
	})
}
