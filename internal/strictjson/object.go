package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxDepth bounds how deep Object follows the values of an object's
// members: a value nested deeper is refused (TooDeep).
const MaxDepth = 64

// Kind is what Object found wrong.
type Kind int

// The kinds of ObjectError.
const (
	Syntax    Kind = iota + 1 // not valid JSON
	NotObject                 // the text is valid JSON but not an object
	Duplicate                 // a key given twice in one object, at any depth
	Unknown                   // a member's key is not among the allowed keys
	TooDeep                   // a member's value is nested deeper than MaxDepth
	Trailing                  // data after the object
	BadText                   // ObjectText: a key or string holds invalid UTF-8 or an escaped lone surrogate
)

// ObjectError is what Object refuses, by the path of the value at fault.
type ObjectError struct {
	// Path names the value at fault from the top of the caller's document,
	// e.g. "tools[2].name" or "action.arguments.to". For a fault of the
	// object as a whole it is the path given to Object ("" at the top).
	Path string
	// Whole is true when the fault is with the object as a whole (not
	// JSON, not an object, data after it) rather than with one member.
	Whole   bool
	Kind    Kind
	Problem string // what is wrong, without the path: "given twice", "not valid JSON: …"
}

// Error returns "path: problem" (or the problem alone at the top).
func (e *ObjectError) Error() string {
	if e.Path == "" {
		return e.Problem
	}
	return e.Path + ": " + e.Problem
}

// Object decodes data as one JSON object and returns its members' raw
// values by key, refusing a key given twice at any depth (two parsers could
// read different data), a key not in allowed, nesting beyond MaxDepth and
// anything after the object. Errors are *ObjectError with the path of the
// value at fault, prefixed by path ("" for a whole text); the members'
// values are the caller's to check. Time and memory are linear in len(data).
func Object(data []byte, path string, allowed ...string) (map[string]json.RawMessage, error) {
	whole := func(kind Kind, format string, args ...any) error {
		return &ObjectError{Path: path, Whole: true, Kind: kind, Problem: fmt.Sprintf(format, args...)}
	}
	if !json.Valid(data) {
		var first json.RawMessage
		if err := json.NewDecoder(bytes.NewReader(data)).Decode(&first); err != nil {
			return nil, whole(Syntax, "not valid JSON: %v", err)
		}
		if first[0] != '{' {
			return nil, whole(NotObject, "want a JSON object")
		}
		return nil, whole(Trailing, "data after the JSON object")
	}
	i := skipSpace(data, 0)
	if data[i] != '{' {
		return nil, whole(NotObject, "want a JSON object")
	}
	members := map[string]json.RawMessage{}
	root := &segment{key: path, root: true}
	for i = skipSpace(data, i+1); data[i] != '}'; {
		end := stringEnd(data, i)
		key := keyOf(data[i:end])
		at := &segment{up: root, key: key}
		if _, dup := members[key]; dup {
			return nil, memberError(at, Duplicate, "given twice")
		}
		if !slices.Contains(allowed, key) {
			return nil, memberError(at, Unknown, "unknown field (allowed: %s)", strings.Join(allowed, ", "))
		}
		start := skipSpace(data, skipSpace(data, end)+1) // past the ':'
		vend, err := checkValue(data, start, at, 0)
		if err != nil {
			return nil, err
		}
		members[key] = json.RawMessage(data[start:vend])
		if i = skipSpace(data, vend); data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return members, nil
}

// ObjectText is Object that also refuses invalid UTF-8 and escaped lone
// surrogates in any key or string, at any depth (BadText): text that
// encoding/json would make U+FFFD, or keep raw in a json.RawMessage and
// write back out as invalid JSON. The text is checked by Check, once
// Object has accepted the structure.
func ObjectText(data []byte, path string, allowed ...string) (map[string]json.RawMessage, error) {
	members, err := Object(data, path, allowed...)
	if err != nil {
		return nil, err
	}
	if where, problem, ok := Check(data); !ok { // Object refused any key given twice: this is text
		if path != "" {
			where = path + "." + where
		}
		return nil, &ObjectError{Path: where, Kind: BadText, Problem: problem}
	}
	return members, nil
}

// MaxPathKey is the most bytes of a key that an error's path shows: a
// longer key is cut there and marked "…", so that an error about a huge
// key does not quote it.
const MaxPathKey = 64

// segment is one step of a path, built only when an error names it: a
// key (or the caller's prefix, at the root) or an array index.
type segment struct {
	up    *segment
	key   string
	index int
	elem  bool // an array element: index, not key
	root  bool // the caller's prefix, shown as it is
}

// String names the value at s, e.g. "action.arguments.to[3]".
func (s *segment) String() string {
	var segs []*segment
	for p := s; p != nil; p = p.up {
		segs = append(segs, p)
	}
	var b strings.Builder
	for i := len(segs) - 1; i >= 0; i-- {
		p := segs[i]
		switch {
		case p.root:
			b.WriteString(p.key)
		case p.elem:
			b.WriteString("[" + strconv.Itoa(p.index) + "]")
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(ShortKey(p.key))
		}
	}
	return b.String()
}

// ShortKey is a key as a path shows it: valid UTF-8, and cut to
// MaxPathKey bytes (marked "…") when longer.
func ShortKey(key string) string {
	if len(key) > MaxPathKey {
		cut := MaxPathKey
		for cut > 0 && !utf8.RuneStart(key[cut]) {
			cut--
		}
		key = key[:cut] + "…"
	}
	return strings.ToValidUTF8(key, "\uFFFD")
}

func memberError(at *segment, kind Kind, format string, args ...any) error {
	return &ObjectError{Path: at.String(), Kind: kind, Problem: fmt.Sprintf(format, args...)}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// checkValue checks the value starting at b[i] of a valid JSON text b (at
// names it, depth is its nesting below the member) and returns the index
// just after it. It refuses a key given twice in any object inside it and
// nesting deeper than MaxDepth.
func checkValue(b []byte, i int, at *segment, depth int) (int, error) {
	if depth > MaxDepth {
		return 0, memberError(at, TooDeep, "nested deeper than %d levels", MaxDepth)
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i), nil
	case '{':
		var keys map[string]struct{}
		child := segment{up: at}
		for i = skipSpace(b, i+1); b[i] != '}'; {
			end := stringEnd(b, i)
			child.key = keyOf(b[i:end])
			if keys == nil {
				keys = map[string]struct{}{}
			}
			if _, dup := keys[child.key]; dup {
				return 0, memberError(&child, Duplicate, "given twice")
			}
			keys[child.key] = struct{}{}
			vend, err := checkValue(b, skipSpace(b, skipSpace(b, end)+1), &child, depth+1)
			if err != nil {
				return 0, err
			}
			if i = skipSpace(b, vend); b[i] == ',' {
				i = skipSpace(b, i+1)
			}
		}
		return i + 1, nil
	case '[':
		child := segment{up: at, elem: true}
		for i = skipSpace(b, i+1); b[i] != ']'; child.index++ {
			vend, err := checkValue(b, i, &child, depth+1)
			if err != nil {
				return 0, err
			}
			if i = skipSpace(b, vend); b[i] == ',' {
				i = skipSpace(b, i+1)
			}
		}
		return i + 1, nil
	}
	for i < len(b) && !strings.ContainsRune(" \t\n\r,]}", rune(b[i])) { // a number, true, false or null
		i++
	}
	return i, nil
}
