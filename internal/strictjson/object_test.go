package strictjson

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestObjectReturnsTheMembersRaw(t *testing.T) {
	m, err := Object([]byte(` {"a": {"x": [1, {"y": 2}]}, "b": "s", "c": null} `), "", "a", "b", "c", "d")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": `{"x": [1, {"y": 2}]}`, "b": `"s"`, "c": "null"}
	if len(m) != len(want) {
		t.Errorf("members %v, want the keys %v", slices.Sorted(maps.Keys(m)), slices.Sorted(maps.Keys(want)))
	}
	for k, v := range want {
		if string(m[k]) != v {
			t.Errorf("member %s = %s, want %s", k, m[k], v)
		}
	}
	// No allowed key: only the empty object.
	if m, err := Object([]byte(`{}`), ""); err != nil || len(m) != 0 {
		t.Errorf("{} with no allowed key: %v %v", m, err)
	}
}

// TestObjectNamesWhatIsWrongByPath: each refusal of ObjectText has its
// kind, the path of the value at fault (the prefix given, then keys and
// indices) and its problem; Whole tells the object's own faults from its
// members'. Object refuses the same but invalid text, which it leaves to
// its caller.
func TestObjectNamesWhatIsWrongByPath(t *testing.T) {
	// The member's value is at depth 0; MaxDepth+2 arrays put a value at
	// depth MaxDepth+1.
	deep := `{"a": ` + strings.Repeat("[", MaxDepth+2) + strings.Repeat("]", MaxDepth+2) + `}`
	cases := []struct {
		text, path string
		allowed    []string
		kind       Kind
		at         string
		whole      bool
		problem    string // "" when the decoder's own message follows "not valid JSON: "
	}{
		{`[]`, "", []string{"a"}, NotObject, "", true, "want a JSON object"},
		{`"a"`, "tools[2]", []string{"a"}, NotObject, "tools[2]", true, "want a JSON object"},
		{`action=f`, "", []string{"a"}, Syntax, "", true, ""},
		{`{"a": 1`, "", []string{"a"}, Syntax, "", true, ""},
		{`{"a": 1} {}`, "", []string{"a"}, Trailing, "", true, "data after the JSON object"},
		{`{"a": 1, "a": 2}`, "", []string{"a"}, Duplicate, "a", false, "given twice"},
		{`{"a": 1, "a": 2}`, "action", []string{"a"}, Duplicate, "action.a", false, "given twice"},
		{`{"a": {"b": [0, {"c": 1, "c": 2}]}}`, "", []string{"a"}, Duplicate, "a.b[1].c", false, "given twice"},
		{`{"a": 1, "b": 2}`, "x", []string{"a", "c"}, Unknown, "x.b", false, "unknown field (allowed: a, c)"},
		{`{"a": 1}`, "", nil, Unknown, "a", false, "unknown field (allowed: )"},
		{deep, "", []string{"a"}, TooDeep, "a" + strings.Repeat("[0]", MaxDepth+1), false, "nested deeper than 64 levels"},
		{"{\"a\": \"x\xffy\"}", "", []string{"a"}, BadText, "a", false, "holds invalid UTF-8 (byte 0xff)"},
		{`{"a": {"b": [1, "\ud800"]}}`, "action", []string{"a"}, BadText, "action.a.b[1]", false, `holds the escape \ud800 of a lone UTF-16 surrogate (not a character)`},
		{"{\"a\": {\"k\xfe\": 1}}", "", []string{"a"}, BadText, "a.k\uFFFD", false, "key holds invalid UTF-8 (byte 0xfe)"},
		{`[] x`, "", []string{"a"}, NotObject, "", true, "want a JSON object"},
	}
	for _, c := range cases {
		_, err := ObjectText([]byte(c.text), c.path, c.allowed...)
		if _, plain := Object([]byte(c.text), c.path, c.allowed...); (plain == nil) != (c.kind == BadText) {
			t.Errorf("%.40s: Object: %v", c.text, plain)
		}
		var e *ObjectError
		if !errors.As(err, &e) {
			t.Errorf("%.40s: error %v, want an *ObjectError", c.text, err)
			continue
		}
		problemOK := e.Problem == c.problem
		if c.problem == "" {
			problemOK = strings.HasPrefix(e.Problem, "not valid JSON: ")
		}
		if e.Kind != c.kind || e.Path != c.at || e.Whole != c.whole || !problemOK {
			t.Errorf("%.40s at %q: %+v, want kind %d path %q whole %v problem %q", c.text, c.path, e, c.kind, c.at, c.whole, c.problem)
		}
		want := c.at + ": " + e.Problem
		if c.at == "" {
			want = e.Problem
		}
		if err.Error() != want {
			t.Errorf("%.40s: Error() = %q, want %q", c.text, err.Error(), want)
		}
	}
	// Values down to depth MaxDepth are accepted.
	ok := `{"a": ` + strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1) + `}`
	if _, err := Object([]byte(ok), "", "a"); err != nil {
		t.Errorf("a value at depth %d: %v", MaxDepth, err)
	}
}

// FuzzObject: Object never panics; what it accepts is an object of
// allowed keys whose members are each valid JSON with no key given twice.
func FuzzObject(f *testing.F) {
	for _, s := range []string{`{"a": 1, "a": 2}`, `{"a": [{"b": 1, "b": 2}]}`, `{"a": {"c": 1}} x`, `{}`, `[1]`, `{"b": "x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Object(b, "", "a", "b")
		if err != nil {
			var e *ObjectError
			if !errors.As(err, &e) || e.Kind < Syntax || e.Kind > Trailing {
				t.Fatalf("error %v is not an *ObjectError of a known kind", err)
			}
			return
		}
		for k, raw := range m {
			if k != "a" && k != "b" {
				t.Fatalf("accepted the key %q", k)
			}
			if !json.Valid(raw) {
				t.Fatalf("member %s = %q is not valid JSON", k, raw)
			}
			if path, problem, ok := Check(raw); !ok && strings.HasPrefix(problem, "given twice") {
				t.Fatalf("member %s: %s %s", k, path, problem)
			}
		}
		// ObjectText accepts the same objects less those with invalid text.
		mt, err := ObjectText(b, "", "a", "b")
		var e *ObjectError
		switch {
		case err != nil && (!errors.As(err, &e) || e.Kind < Syntax || e.Kind > BadText):
			t.Fatalf("ObjectText: error %v is not an *ObjectError of a known kind", err)
		case err != nil && e.Kind != BadText:
			t.Fatalf("ObjectText refuses what Object accepts: %v", err)
		case err == nil && len(mt) != len(m):
			t.Fatalf("ObjectText: %d members, Object %d", len(mt), len(m))
		}
		for k, raw := range mt {
			if path, problem, ok := Check(raw); !ok {
				t.Fatalf("ObjectText: member %s: %s %s", k, path, problem)
			}
		}
	})
}

// TestObjectIsLinearAndQuotesLittle: a body of a long key holding a large
// array (each element's path would repeat the key) is checked in time
// linear in its size, and errors about a huge key quote 64 bytes of it.
func TestObjectIsLinearAndQuotesLittle(t *testing.T) {
	key := strings.Repeat("k", 100_000)
	elems := strings.Repeat("1,", 200_000) + "1"
	body := []byte(`{"a": {"arguments": {"` + key + `": [` + elems + `, {"x": 1, "x": 2}]}}}`)
	start := time.Now()
	_, err := ObjectText(body, "", "a")
	var e *ObjectError
	if !errors.As(err, &e) || e.Kind != Duplicate {
		t.Fatalf("%v", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("%d bytes took %v", len(body), took)
	}
	want := "a.arguments." + strings.Repeat("k", MaxPathKey) + "…[200001].x"
	if e.Path != want {
		t.Errorf("path %.200q, want %q", e.Path, want)
	}
	// An unknown huge key is named by its first 64 bytes.
	_, err = Object([]byte(`{"`+key+`": 1}`), "", "a")
	if !errors.As(err, &e) || e.Kind != Unknown || len(err.Error()) > 200 {
		t.Errorf("unknown huge key: %.300v", err)
	}
	// Allocations stay proportional to the body: a key's path is not
	// built per element.
	allocs := testing.AllocsPerRun(1, func() { ObjectText(body, "", "a") })
	if allocs > 100 {
		t.Errorf("%v allocations for one array", allocs)
	}
}
