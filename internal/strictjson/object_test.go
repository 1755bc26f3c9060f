package strictjson

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestObject(t *testing.T) {
	cases := []struct {
		name, text string
		members    map[string]string // the raw values, when accepted
		is         error             // else what errors.Is finds
		key        string            // and the member it names
		msg        string            // and the message
	}{
		{"members raw", `{"a": 1, "b": {"c": [true, null]}, "d": "x"}`, map[string]string{"a": "1", "b": `{"c": [true, null]}`, "d": `"x"`}, nil, "", ""},
		{"empty", " {} \n", map[string]string{}, nil, "", ""},
		{"a key repeated inside a value is the value's business", `{"a": {"b": 1, "b": 2}}`, map[string]string{"a": `{"b": 1, "b": 2}`}, nil, "", ""},
		{"nothing", "", nil, ErrSyntax, "", "not valid JSON: EOF"},
		{"not an object", `["a"]`, nil, ErrNotObject, "", "not a JSON object"},
		{"a string", `"{}"`, nil, ErrNotObject, "", "not a JSON object"},
		{"repeated key", `{"a": 1, "b": 2, "a": 3}`, nil, ErrRepeatedKey, "a", `key "a" repeated`},
		{"bad value", `{"a": 1, "b": tru}`, nil, ErrSyntax, "b", "not valid JSON: invalid character '}' in literal true (expecting 'e')"},
		{"unclosed", `{"a": 1`, nil, ErrSyntax, "", "not valid JSON: EOF"},
		{"trailing object", `{"a": 1} {}`, nil, ErrTrailing, "", "text after the JSON object"},
		{"trailing text", `{"a": 1} x`, nil, ErrTrailing, "", "text after the JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Object([]byte(c.text))
			if c.is == nil {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				raw := map[string]string{}
				for k, v := range got {
					raw[k] = string(v)
				}
				if !maps.Equal(raw, c.members) {
					t.Fatalf("members %v, want %v", raw, c.members)
				}
				return
			}
			var oe *ObjectError
			if !errors.Is(err, c.is) || !errors.As(err, &oe) || oe.Key != c.key || err.Error() != c.msg {
				t.Fatalf("error %v (%#v), want %v naming %q: %q", err, err, c.is, c.key, c.msg)
			}
			if got != nil {
				t.Fatalf("members %v with an error", got)
			}
		})
	}
}

// TestDecodeObjectLeavesTheRest: DecodeObject stops at the closing brace,
// so a stream of objects reads one at a time.
func TestDecodeObjectLeavesTheRest(t *testing.T) {
	dec := json.NewDecoder(strings.NewReader(`{"a": 1} {"b": 2}`))
	var keys []string
	for range 2 {
		m, err := DecodeObject(dec)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, slices.Sorted(maps.Keys(m))...)
	}
	if !slices.Equal(keys, []string{"a", "b"}) {
		t.Fatalf("keys %v", keys)
	}
}
