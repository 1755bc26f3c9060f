package prompt

import (
	"slices"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/model/chat"
)

// TestVersionToolDeclarations: v1 declares the package's tools; synth its
// own short ones from tools.json, written as the template writes them
// (Python's json.dumps of the dicts, pasted here), with the same names.
func TestVersionToolDeclarations(t *testing.T) {
	for _, tc := range []struct {
		version      string
		memory, judg chat.Tool
		rendered     string
	}{
		{"v1", MemoryTool, JudgeTool, ""},
		{"synth", chat.Tool{Name: MemoryToolName}, chat.Tool{Name: JudgeToolName},
			"{\"type\": \"function\", \"function\": {\"name\": \"update_memory\", \"description\": \"Replace the memory.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"content\": {\"type\": \"string\"}}, \"required\": [\"content\"]}}}\n" +
				"{\"type\": \"function\", \"function\": {\"name\": \"assess_risk\", \"description\": \"Decide on the pending tool call.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"rationale\": {\"type\": \"string\"}, \"decision\": {\"type\": \"string\", \"enum\": [\"approve\", \"reject\"]}}, \"required\": [\"rationale\", \"decision\"]}}}"},
	} {
		p, err := NewPrompts(Options{Version: tc.version, TrackIntent: true, TrackAttacks: true, BudgetChars: 600})
		if err != nil {
			t.Fatal(err)
		}
		if p.MemoryTool.Name != MemoryToolName || p.JudgeTool.Name != JudgeToolName {
			t.Errorf("%s: tools %q, %q", tc.version, p.MemoryTool.Name, p.JudgeTool.Name)
		}
		text := chat.Render(nil, []chat.Tool{p.MemoryTool, p.JudgeTool}, chat.Options{})
		if tc.rendered == "" {
			if want := chat.Render(nil, []chat.Tool{MemoryTool, JudgeTool}, chat.Options{}); text != want {
				t.Errorf("%s: tools differ from the package's", tc.version)
			}
			continue
		}
		if !strings.Contains(text, "<tools>\n"+tc.rendered+"\n</tools>") {
			t.Errorf("%s: tool declarations in\n%s\nwant\n%s", tc.version, text, tc.rendered)
		}
	}
}

func TestParseToolsRefuses(t *testing.T) {
	memory := `"update_memory": {"parameters": {"type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]}}`
	judge := `"assess_risk": {"parameters": {"type": "object", "properties": {"decision": {"type": "string"}, "rationale": {"type": "string"}}, "required": ["decision", "rationale"]}}`
	for _, tc := range []struct{ name, src, want string }{
		{"not JSON", `{`, "unexpected end"},
		{"one tool", `{` + memory + `}`, "exactly update_memory and assess_risk"},
		{"another tool", `{` + memory + `, "delete_all": {}}`, "exactly update_memory and assess_risk"},
		{"missing required", `{` + strings.Replace(memory, `"required": ["content"]`, `"required": []`, 1) + `, ` + judge + `}`, "update_memory: parameters must declare and require exactly [content]"},
		{"extra parameter", `{` + memory + `, ` + strings.Replace(judge, `"rationale": {"type": "string"}`, `"rationale": {"type": "string"}, "x": {}`, 1) + `}`, "assess_risk: parameters"},
		{"renamed parameter", `{` + strings.Replace(memory, `"content": {`, `"text": {`, 1) + `, ` + judge + `}`, "update_memory: parameters"},
		{"repeated required", `{` + memory + `, ` + strings.Replace(judge, `["decision", "rationale"]`, `["decision", "decision"]`, 1) + `}`, "assess_risk: parameters"},
	} {
		if _, _, _, err := parseTools([]byte(tc.src)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	// The order of assess_risk's required list is the judge's.
	for _, order := range [][]string{{"decision", "rationale"}, {"rationale", "decision"}} {
		src := `{` + memory + `, ` + strings.Replace(judge, `["decision", "rationale"]`, `["`+order[0]+`", "`+order[1]+`"]`, 1) + `}`
		if _, _, args, err := parseTools([]byte(src)); err != nil || !slices.Equal(args, order) {
			t.Errorf("required %v: judge arguments %v, %v", order, args, err)
		}
	}
}
