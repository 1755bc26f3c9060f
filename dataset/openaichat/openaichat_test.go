package openaichat

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/dataset"
)

// importTo imports in with o and writes the trajectories to a JSONL file,
// returning its bytes and the summary.
func importTo(t *testing.T, in string, o Options) ([]byte, *Summary) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.jsonl")
	w, err := dataset.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	o.Emit = w.Write
	sum, err := ImportFile(in, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dataset.ReadAll(out); err != nil { // what data validate does
		t.Fatalf("the imported file does not validate: %v", err)
	}
	return b, sum
}

// TestImportMatchesHandWrittenFile: parallel tool calls, results out of
// order (one after a later user message, one in text parts), a second user
// message, content parts, arguments with their key order and number
// spelling, a conversation without labels taken as benign and one without
// tool calls give exactly testdata/expected.jsonl (written by hand).
func TestImportMatchesHandWrittenFile(t *testing.T) {
	got, sum := importTo(t, "testdata/conversations.jsonl", Options{Unlabeled: Benign})
	want, err := os.ReadFile("testdata/expected.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			g, w := "", ""
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Errorf("line %d:\n got %s\nwant %s", i+1, g, w)
			}
		}
	}
	// The file: 3 conversations, 5 actions (4 + 1 + 0), one labeled 1.
	if *sum != (Summary{Conversations: 3, Trajectories: 3, Actions: 5, Positives: 1}) {
		t.Errorf("summary %+v", *sum)
	}
}

// With --unlabeled skip (the default), the conversation without a labels
// object is left out; the others are as before.
func TestUnlabeledSkip(t *testing.T) {
	got, sum := importTo(t, "testdata/conversations.jsonl", Options{})
	want, err := os.ReadFile("testdata/expected.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(want), "\n")
	if w := lines[0] + lines[2]; string(got) != w {
		t.Errorf("got\n%s\nwant\n%s", got, w)
	}
	if *sum != (Summary{Conversations: 3, Trajectories: 2, Skipped: 1, Actions: 4, Positives: 1}) {
		t.Errorf("summary %+v", *sum)
	}
	// Convert alone takes the same defaults.
	conv := []byte(`{"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}]}]}`)
	if tr, err := Convert(conv, Options{}); tr != nil || err != nil {
		t.Errorf("Convert without labels: %+v, %v; want it left out", tr, err)
	}
	if tr, err := Convert(conv, Options{Unlabeled: Benign}); err != nil || tr.Suite != "openai" || tr.Model != "unknown" || tr.Turns[0].LabelSource != dataset.LabelAssumed {
		t.Errorf("Convert --unlabeled benign: %+v, %v", tr, err)
	}
}

func TestParseUnlabeled(t *testing.T) {
	for _, c := range []struct {
		in, err string
	}{{"skip", ""}, {"benign", ""}, {"guard", "holds no guard decision"}, {"", `want skip or benign`}, {"Skip", "want skip or benign"}} {
		u, err := ParseUnlabeled(c.in)
		if c.err == "" {
			if err != nil || string(u) != c.in {
				t.Errorf("%q: %q, %v", c.in, u, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: error %v, want %q", c.in, err, c.err)
		}
	}
}

// Every bad conversation fails with a *dataset.Error naming the file, the
// line and the field (with the message index).
func TestBadInputNamesLineMessageAndField(t *testing.T) {
	const ok = `{"messages": [{"role": "user", "content": "u"}]}`
	msg := func(ms string) string { return `{"messages": [{"role": "user", "content": "u"}, ` + ms + `]}` }
	asst := func(args string) string {
		return msg(`{"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": ` + args + `}}]}`)
	}
	cases := []struct {
		name, line, field, msg string
	}{
		{"not JSON", `{"messages": [`, "", "not valid JSON"},
		{"unknown top-level key", `{"messages": [], "label": {}}`, "label", "unknown field"},
		{"key given twice", `{"messages": [], "messages": []}`, "messages", "given twice"},
		{"missing messages", `{"id": "x"}`, "messages", "missing"},
		{"messages not an array", `{"messages": {}}`, "messages", "want an array, got an object"},
		{"empty id", `{"id": "", "messages": []}`, "id", "non-empty string"},
		{"message not an object", msg(`7`), "messages[1]", "want an object, got a number"},
		{"missing role", msg(`{"content": "x"}`), "messages[1].role", "missing"},
		{"unknown role", msg(`{"role": "robot"}`), "messages[1].role", `got "robot"`},
		{"legacy function_call", msg(`{"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}`), "messages[1].function_call", "not supported"},
		{"content a number", msg(`{"role": "user", "content": 3}`), "messages[1].content", "want a string, null or an array of text parts"},
		{"image part", msg(`{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]}`), "messages[1].content[1].type", "only text parts"},
		{"part without text", msg(`{"role": "user", "content": [{"type": "text"}]}`), "messages[1].content[0].text", "missing"},
		{"tool_calls not an array", msg(`{"role": "assistant", "tool_calls": {}}`), "messages[1].tool_calls", "want an array"},
		{"call without id", msg(`{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}`), "messages[1].tool_calls[0].id", "missing"},
		{"call of another type", msg(`{"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "function": {"name": "f", "arguments": "{}"}}]}`), "messages[1].tool_calls[0].type", `want "function"`},
		{"call without name", msg(`{"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}`), "messages[1].tool_calls[0].function.name", "missing"},
		{"arguments an object, not a string", asst(`{"a": 1}`), "messages[1].tool_calls[0].function.arguments", "want a string, got an object"},
		{"arguments not JSON", asst(`"{\"a\": "`), "messages[1].tool_calls[0].function.arguments", "not JSON"},
		{"arguments an array", asst(`"[1]"`), "messages[1].tool_calls[0].function.arguments", "want a JSON object in the string, got an array"},
		{"arguments key twice", asst(`"{\"a\": 1, \"a\": 2}"`), "messages[1].tool_calls[0].function.arguments", "given twice"},
		{"call id given twice", msg(`{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{}"}}, {"id": "c", "function": {"name": "g", "arguments": "{}"}}]}`), "messages[1].tool_calls[1].id", "earlier call"},
		{"tool message without id", msg(`{"role": "tool", "content": "x"}`), "messages[1].tool_call_id", "missing"},
		{"answer to no call", asst(`"{}"`)[:len(asst(`"{}"`))-2] + `, {"role": "tool", "tool_call_id": "zz", "content": "x"}]}`, "messages[2].tool_call_id", `"zz" names no tool call`},
		{"answered twice", asst(`"{}"`)[:len(asst(`"{}"`))-2] + `, {"role": "tool", "tool_call_id": "c1", "content": "x"}, {"role": "tool", "tool_call_id": "c1", "content": "y"}]}`, "messages[3].tool_call_id", "answered twice (first by messages[2])"},
		{"label for no call", `{"messages": [], "labels": {"c9": 1}}`, "labels.c9", "names no tool call"},
		{"label 2", asst(`"{}"`)[:len(asst(`"{}"`))-1] + `, "labels": {"c1": 2}}`, "labels.c1", "want 0 or 1"},
		{"label true", asst(`"{}"`)[:len(asst(`"{}"`))-1] + `, "labels": {"c1": true}}`, "labels.c1", "want 0 or 1, got a boolean"},
		{"labels an array", `{"messages": [], "labels": [1]}`, "labels", "want an object"},
		{"tools not an array", `{"messages": [], "tools": "all"}`, "tools", "want an array"},
		{"escaped lone surrogate", msg(`{"role": "user", "content": "\ud800"}`), "messages[1].content", "surrogate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := filepath.Join(t.TempDir(), "in.jsonl")
			// The bad conversation is on line 3, after a good one and a blank line.
			if err := os.WriteFile(in, []byte(ok+"\n\n"+c.line+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ImportFile(in, Options{Unlabeled: Benign, Emit: func(*dataset.Trajectory) error { return nil }})
			var e *dataset.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want *dataset.Error", err, err)
			}
			if e.File != in || e.Line != 3 || e.Field != c.field || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q: line %d field %q; want line 3 field %q msg %q", err, e.Line, e.Field, c.field, c.msg)
			}
		})
	}
}

// Two conversations with one id are refused at the second, naming both lines.
func TestDuplicateIDs(t *testing.T) {
	in := filepath.Join(t.TempDir(), "in.jsonl")
	line := `{"id": "a", "messages": []}`
	os.WriteFile(in, []byte(line+"\n"+line+"\n"), 0o644)
	_, err := ImportFile(in, Options{Emit: func(*dataset.Trajectory) error { return nil }})
	var e *dataset.Error
	if !errors.As(err, &e) || e.Line != 2 || e.Field != "id" || !strings.Contains(err.Error(), "first at line 1") {
		t.Errorf("error %v", err)
	}
}

// A line longer than MaxLineBytes is refused without reading it whole.
func TestLineTooLong(t *testing.T) {
	long := `{"messages": [{"role": "user", "content": "` + strings.Repeat("x", MaxLineBytes) + `"}]}`
	_, err := Import(strings.NewReader("{\"messages\": []}\n"+long+"\n"), "big.jsonl", Options{Emit: func(*dataset.Trajectory) error { return nil }})
	var e *dataset.Error
	if !errors.As(err, &e) || e.Line != 2 || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("error %v", err)
	}
}

// More than MaxToolCalls tool calls in a conversation are refused.
func TestTooManyToolCalls(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"messages": [{"role": "assistant", "tool_calls": [`)
	for i := range MaxToolCalls + 1 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"id": "c` + strconv.Itoa(i) + `", "function": {"name": "f", "arguments": "{}"}}`)
	}
	b.WriteString(`]}]}`)
	_, err := Convert([]byte(b.String()), Options{Unlabeled: Benign})
	var fe *dataset.FieldError
	if !errors.As(err, &fe) || fe.Field != "messages[0].tool_calls" || !strings.Contains(fe.Msg, "more than 10000") {
		t.Errorf("error %v", err)
	}
}
