package strictjson

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
)

// Members returns the members of raw, one JSON object, by key; ok is false
// when raw is not valid JSON or holds another kind of value (null
// included). A key given twice keeps its last value: run Check on the text
// to refuse it.
func Members(raw []byte) (members map[string]json.RawMessage, ok bool) {
	if err := json.Unmarshal(raw, &members); err != nil || members == nil {
		return nil, false
	}
	return members, true
}

// UnknownKey returns the first key of members, in sorted order, that is
// not one of known, and whether there is one.
func UnknownKey(members map[string]json.RawMessage, known ...string) (string, bool) {
	for _, k := range slices.Sorted(maps.Keys(members)) {
		if !slices.Contains(known, k) {
			return k, true
		}
	}
	return "", false
}

// ValueKind names the kind of JSON value raw holds, for an error message: "an
// object", "an array", "a string", "a boolean", "null", "a number", or
// "nothing" when raw is blank. It looks at the first byte only, so a text
// that does not parse is named by what it starts as.
func ValueKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}
