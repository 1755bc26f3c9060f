package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// What DecodeObject and Object refuse, for errors.Is.
var (
	ErrSyntax      = errors.New("not valid JSON") // wraps the decoder's own error
	ErrNotObject   = errors.New("not a JSON object")
	ErrRepeatedKey = errors.New("key repeated")
	ErrTrailing    = errors.New("text after the JSON object")
)

// ObjectError is why DecodeObject or Object refused a text: Err is one of
// the errors above, and Key names the member at fault when there is one (a
// key given twice, or a value that is not valid JSON).
type ObjectError struct {
	Err error
	Key string
}

// Error says what is wrong: `key "k" repeated` for a repeated key, else
// Err's message (e.g. "not valid JSON: unexpected EOF").
func (e *ObjectError) Error() string {
	if errors.Is(e.Err, ErrRepeatedKey) {
		return fmt.Sprintf("key %q repeated", e.Key)
	}
	return e.Err.Error()
}

func (e *ObjectError) Unwrap() error { return e.Err }

// DecodeObject reads one JSON object from dec and returns its members' raw
// values by key. A key given twice is refused: JSON parsers disagree on
// which value wins, so the ambiguity could be exploited. It reads nothing
// after the object's closing brace, and it does not look inside the values
// (Check does: keys repeated at any depth, invalid UTF-8, lone surrogates).
// Errors are *ObjectError.
func DecodeObject(dec *json.Decoder) (map[string]json.RawMessage, error) {
	syntax := func(err error, key string) error {
		return &ObjectError{Err: fmt.Errorf("%w: %v", ErrSyntax, err), Key: key}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, syntax(err, "")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, &ObjectError{Err: ErrNotObject}
	}
	members := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, syntax(err, "")
		}
		key := tok.(string) // inside an object the decoder yields string keys
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, syntax(err, key)
		}
		if _, dup := members[key]; dup {
			return nil, &ObjectError{Err: ErrRepeatedKey, Key: key}
		}
		members[key] = raw
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, syntax(err, "")
	}
	return members, nil
}

// Object is DecodeObject on data that must hold the object alone:
// anything but whitespace after it is ErrTrailing.
func Object(data []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	members, err := DecodeObject(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &ObjectError{Err: ErrTrailing}
	}
	return members, nil
}
