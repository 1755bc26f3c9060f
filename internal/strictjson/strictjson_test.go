package strictjson

import (
	"encoding/json"
	"testing"
)

func TestCheckNamesThePathOfWhatJSONWouldHide(t *testing.T) {
	cases := []struct {
		text, path, problem string
	}{
		{`{"a": 1, "b": 2}`, "", ""},
		{`{"a": 1, "a": 2}`, "a", "given twice in one object (the last value would silently win)"},
		{`{"a": {"b": [1, {"c": 1}, {"c": 1, "c": 2}]}}`, "a.b[2].c", "given twice in one object (the last value would silently win)"},
		{`[{"a": 1}, {"a": 1}]`, "", ""}, // the same key in two objects
		{`{"a": [[], ["x", "y\ud800"]]}`, "a[1][1]", `holds the escape \ud800 of a lone UTF-16 surrogate (not a character)`},
		{`{"a": "\ud83d\ude00", "b": "\\ud800"}`, "", ""}, // a pair; an escaped backslash
		{"{\"a\": \"\xff\"}", "a", "holds invalid UTF-8 (byte 0xff)"},
		{"{\"\xc3\": 1}", "\uFFFD", "key holds invalid UTF-8 (byte 0xc3)"},
		{`{"a": "\udc00"}`, "a", `holds the escape \udc00 of a lone UTF-16 surrogate (not a character)`},
	}
	for _, c := range cases {
		if !json.Valid([]byte(c.text)) {
			t.Fatalf("%s: not valid JSON", c.text)
		}
		path, problem, ok := Check([]byte(c.text))
		if ok != (c.problem == "") || path != c.path || problem != c.problem {
			t.Errorf("Check(%s) = %q, %q, %v; want %q, %q", c.text, path, problem, ok, c.path, c.problem)
		}
	}
}

// FuzzCheck: Check never panics, and on a text that parsed into a Go map
// with as many keys as it has, no duplicate is reported at the top level.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a": 1, "a": 2}`, `{"a": [{"b": "\ud800"}]}`, "{\"a\": \"\xff\"}", `[1, [2, [3]]]`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		path, problem, ok := Check(b)
		if ok && (path != "" || problem != "") {
			t.Fatalf("ok with %q %q", path, problem)
		}
	})
}
