package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestJSONThatWouldBeSilentlyChangedIsRefused: what encoding/json lets
// through without a word — a key given twice (the last value would win,
// as in `"label": 1, "label": 0`), invalid UTF-8 (it would become
// U+FFFD in a string, and stay raw inside the arguments), an escaped lone
// surrogate — is an error naming the line and the field.
func TestJSONThatWouldBeSilentlyChangedIsRefused(t *testing.T) {
	cases := []struct {
		name, text, field, msg string
	}{
		{"label given twice", strings.Replace(good, `"label": 1`, `"label": 1, "label": 0`, 1), "turns[0].label", "given twice"},
		{"id given twice", strings.Replace(good, `"id": "x"`, `"id": "x", "id": "y"`, 1), "id", "given twice"},
		{"argument given twice", strings.Replace(good, `{"k": 1}`, `{"k": 1, "k": 2}`, 1), "turns[0].action.arguments.k", "given twice"},
		{"nested argument given twice", strings.Replace(good, `{"k": 1}`, `{"k": [{"a": 1}, {"a": 1, "a": 2}]}`, 1), "turns[0].action.arguments.k[1].a", "given twice"},
		{"invalid UTF-8 in an observation", strings.Replace(good, `"observation": "o"`, "\"observation\": \"o\xff\"", 1), "turns[0].observation", "invalid UTF-8 (byte 0xff)"},
		{"invalid UTF-8 in an argument", strings.Replace(good, `{"k": 1}`, "{\"k\": \"\xc3\"}", 1), "turns[0].action.arguments.k", "invalid UTF-8"},
		{"invalid UTF-8 in an argument's key", strings.Replace(good, `{"k": 1}`, "{\"k\xe2\x82\": 1}", 1), "turns[0].action.arguments.k", "key holds invalid UTF-8"},
		{"lone surrogate in the user prompt", strings.Replace(good, `"user_prompt": "p"`, `"user_prompt": "p\ud800"`, 1), "user_prompt", `escape \ud800 of a lone UTF-16 surrogate`},
		{"lone low surrogate in an argument", strings.Replace(good, `{"k": 1}`, `{"k": "\udc00x"}`, 1), "turns[0].action.arguments.k", `\udc00`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.jsonl")
			os.WriteFile(p, []byte(c.text+"\n"), 0o644)
			_, err := ReadAll(p)
			var e *Error
			// (A key with invalid UTF-8 is named as decoded: with U+FFFD.)
			if !errors.As(err, &e) || e.Line != 1 || strings.TrimRight(e.Field, "\uFFFD") != c.field || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %v, want line 1, field %q, %q", err, c.field, c.msg)
			}
		})
	}
}

// TestValidTextIsKept: a surrogate pair, a literal U+FFFD, an escaped
// backslash before "ud800", and the same key in two different objects are
// all fine.
func TestValidTextIsKept(t *testing.T) {
	text := strings.Replace(good, `"observation": "o"`, `"observation": "\ud83d\ude00 \\ud800 `+"\uFFFD"+`"`, 1)
	text = strings.Replace(text, `{"k": 1}`, `{"k": {"k": 1}, "j": [{"k": 1}, {"k": 2}]}`, 1)
	p := filepath.Join(t.TempDir(), "ok.jsonl")
	os.WriteFile(p, []byte(text+"\n"), 0o644)
	ts, err := ReadAll(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ts[0].Turns[0].Observation, "\U0001F600 \\ud800 \uFFFD"; got != want {
		t.Fatalf("observation %q, want %q", got, want)
	}
}

// TestParquetTextIsCheckedToo: Parquet strings are bytes as written, so
// invalid UTF-8 and duplicate argument keys from another writer are
// refused by Validate, naming the row and the field.
func TestParquetTextIsCheckedToo(t *testing.T) {
	inj := "injection_task_0"
	row := func() pqTrajectory {
		return pqTrajectory{ID: "a", Source: "s", Suite: "banking", UserTaskID: "u", InjectionTaskID: &inj, Model: "m",
			Turns: []pqTurn{{Action: pqAction{Name: "f", Arguments: `{"a":1}`}, Observation: "o", Label: 1}}}
	}
	cases := []struct {
		name  string
		edit  func(r *pqTrajectory)
		field string
		msg   string
	}{
		{"observation", func(r *pqTrajectory) { r.Turns[0].Observation = "ok\xffko" }, "turns[0].observation", "invalid UTF-8 (byte 0xff at byte 2)"},
		{"user prompt", func(r *pqTrajectory) { r.UserPrompt = "\xed\xa0\x80" }, "user_prompt", "invalid UTF-8"},
		{"arguments", func(r *pqTrajectory) { r.Turns[0].Action.Arguments = "{\"a\":\"\xff\"}" }, "turns[0].action.arguments", "a: holds invalid UTF-8"},
		{"argument given twice", func(r *pqTrajectory) { r.Turns[0].Action.Arguments = `{"a":1,"a":2}` }, "turns[0].action.arguments", "a: given twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := row()
			c.edit(&r)
			p := writeRawParquet(t, []pqTrajectory{r})
			_, err := ReadAll(p)
			var e *Error
			if !errors.As(err, &e) || e.Row != 1 || e.Field != c.field || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("error %v, want row 1, field %q, %q", err, c.field, c.msg)
			}
		})
	}
}
