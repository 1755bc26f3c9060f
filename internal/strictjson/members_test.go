package strictjson

import (
	"encoding/json"
	"testing"
)

func TestMembersTakesOnlyAnObject(t *testing.T) {
	for _, c := range []struct {
		text string
		keys int // -1: not an object
	}{
		{`{"a": 1, "b": {"c": 2}}`, 2},
		{` {} `, 0},
		{`null`, -1},
		{`[{"a": 1}]`, -1},
		{`"{}"`, -1},
		{`{"a": 1`, -1},
		{`{"a": 1} {"b": 2}`, -1},
	} {
		m, ok := Members([]byte(c.text))
		if ok != (c.keys >= 0) || ok && len(m) != c.keys {
			t.Errorf("Members(%s) = %v, %v; want %d keys", c.text, m, ok, c.keys)
		}
	}
	m, _ := Members([]byte(`{"a": [1, 2], "b": "x"}`))
	if string(m["a"]) != `[1, 2]` || string(m["b"]) != `"x"` {
		t.Errorf("members %q, want the raw values [1, 2] and \"x\"", m)
	}
}

func TestUnknownKeyNamesTheFirstInSortedOrder(t *testing.T) {
	m := map[string]json.RawMessage{"id": nil, "zeta": nil, "beta": nil, "alpha": nil}
	if k, ok := UnknownKey(m, "id", "alpha"); !ok || k != "beta" {
		t.Errorf("UnknownKey = %q, %v; want beta", k, ok)
	}
	if k, ok := UnknownKey(m, "id", "zeta", "beta", "alpha", "more"); ok {
		t.Errorf("UnknownKey = %q with every key known", k)
	}
}

func TestValueKindNamesTheValue(t *testing.T) {
	for text, want := range map[string]string{
		`{"a": 1}`: "an object", ` [1]`: "an array", `"s"`: "a string", `true`: "a boolean",
		`false`: "a boolean", `null`: "null", `-1.5e3`: "a number", `0`: "a number", "  ": "nothing",
	} {
		if got := ValueKind([]byte(text)); got != want {
			t.Errorf("ValueKind(%q) = %q, want %q", text, got, want)
		}
	}
}
