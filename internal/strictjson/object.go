package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
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
// values by key. It refuses what encoding/json would let through: a key
// given twice in the object or in any object inside its values (parsers
// disagree on which value wins, so two readers of one text could see
// different data), a key not among allowed (no allowed key: only {} is
// accepted), a value nested deeper than MaxDepth, and anything after the
// object. path names data inside the caller's document ("" for a whole
// text, "tools[2]" for an element) and prefixes the members' paths in
// errors, which are *ObjectError. Object checks structure only: the
// members' values are the caller's to decode and check.
func Object(data []byte, path string, allowed ...string) (map[string]json.RawMessage, error) {
	whole := func(kind Kind, format string, args ...any) error {
		return &ObjectError{Path: path, Whole: true, Kind: kind, Problem: fmt.Sprintf(format, args...)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, whole(Syntax, "not valid JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, whole(NotObject, "want a JSON object")
	}
	members := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, whole(Syntax, "not valid JSON: %v", err)
		}
		key := tok.(string) // inside an object the decoder yields string keys
		field := join(path, key)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, memberError(field, Syntax, "not valid JSON: %v", err)
		}
		if _, dup := members[key]; dup {
			return nil, memberError(field, Duplicate, "given twice")
		}
		if !slices.Contains(allowed, key) {
			return nil, memberError(field, Unknown, "unknown field (allowed: %s)", strings.Join(allowed, ", "))
		}
		vdec := json.NewDecoder(bytes.NewReader(raw))
		vdec.UseNumber()
		if err := checkValue(vdec, field, 0); err != nil {
			return nil, err
		}
		members[key] = raw
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, whole(Syntax, "not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, whole(Trailing, "data after the JSON object")
	}
	return members, nil
}

func memberError(path string, kind Kind, format string, args ...any) error {
	return &ObjectError{Path: path, Kind: kind, Problem: fmt.Sprintf(format, args...)}
}

// join names the member key of the object at path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// checkValue reads one JSON value from dec, refusing a key given twice in
// any object inside it and nesting deeper than MaxDepth.
func checkValue(dec *json.Decoder, path string, depth int) error {
	if depth > MaxDepth {
		return memberError(path, TooDeep, "nested deeper than %d levels", MaxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return memberError(path, Syntax, "not valid JSON: %v", err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar
	}
	switch d {
	case '{':
		keys := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return memberError(path, Syntax, "not valid JSON: %v", err)
			}
			key := k.(string)
			if keys[key] {
				return memberError(path+"."+key, Duplicate, "given twice")
			}
			keys[key] = true
			if err := checkValue(dec, path+"."+key, depth+1); err != nil {
				return err
			}
		}
	case '[':
		for i := 0; dec.More(); i++ {
			if err := checkValue(dec, path+"["+strconv.Itoa(i)+"]", depth+1); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return memberError(path, Syntax, "not valid JSON: %v", err)
	}
	return nil
}
