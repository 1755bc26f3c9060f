// Package strictjson finds what encoding/json lets through without a word:
// a key given twice (the last silently wins), invalid UTF-8 and lone UTF-16
// surrogate escapes (both become U+FFFD). Every reader of outside JSON runs
// Check after the text parsed; Object decodes one object strictly (only
// allowed keys, none twice at any depth, nothing after it) and names the
// value at fault by its path (serve's request bodies).
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Check returns the path of the first key given twice, string with invalid
// UTF-8 or escaped lone surrogate in the JSON text b (e.g.
// "turns[0].label"; "" for the top level) and what is wrong with it, or
// ok. Call it on a text that parsed (json.Unmarshal or json.Valid): it
// scans without re-checking the syntax, and reports ok on what it cannot
// follow, which the caller's parse reports.
func Check(b []byte) (path, problem string, ok bool) {
	var stack []frame
	fail := func(problem string) (string, string, bool) {
		return pathOf(stack), problem, false
	}
	for i := 0; i < len(b); {
		switch c := b[i]; c {
		case '{', '[':
			stack = append(stack, frame{object: c == '{', wantKey: c == '{'})
			i++
		case '}', ']':
			if len(stack) == 0 {
				return "", "", true
			}
			stack = stack[:len(stack)-1]
			i++
		case ',':
			if len(stack) > 0 {
				top := &stack[len(stack)-1]
				if top.object {
					top.wantKey = true
				} else {
					top.index++
				}
			}
			i++
		case '"':
			end := stringEnd(b, i)
			if end < 0 {
				return "", "", true
			}
			raw := b[i:end]
			i = end
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].wantKey {
				top := &stack[n-1]
				top.wantKey = false
				top.key = keyOf(raw)
				if msg := badText(raw); msg != "" {
					return fail("key " + msg)
				}
				if top.keys == nil {
					top.keys = map[string]struct{}{}
				}
				if _, dup := top.keys[top.key]; dup {
					return fail("given twice in one object (the last value would silently win)")
				}
				top.keys[top.key] = struct{}{}
				continue
			}
			if msg := badText(raw); msg != "" {
				return fail(msg)
			}
		default: // whitespace, ':', numbers, true, false, null
			i++
		}
	}
	return "", "", true
}

// frame is an object or array being scanned by Check.
type frame struct {
	object  bool
	wantKey bool                // object: the next string is a key
	key     string              // object: the key of the value being read
	keys    map[string]struct{} // object: the keys seen
	index   int                 // array: the index of the element being read
}

// pathOf names the value being read, e.g. "turns[0].label".
func pathOf(stack []frame) string {
	var b strings.Builder
	for _, f := range stack {
		if f.object {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(ShortKey(f.key))
		} else {
			b.WriteString("[" + strconv.Itoa(f.index) + "]")
		}
	}
	return b.String()
}

// stringEnd returns the index just after the string token starting at
// b[i] ('"'), or -1 when it does not end.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// keyOf decodes a key's string token.
func keyOf(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	var k string
	json.Unmarshal(raw, &k)
	return k
}

// badText describes what is wrong with the raw bytes of one JSON string
// token: invalid UTF-8, or an escaped lone surrogate; "" when nothing.
func badText(raw []byte) string {
	if !utf8.Valid(raw) {
		i := 0
		for i < len(raw) {
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return fmt.Sprintf("holds invalid UTF-8 (byte 0x%02x)", raw[i])
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return ""
	}
	for i := 0; i+1 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' || i+6 > len(raw) {
			i++ // an escaped character: skip it
			continue
		}
		hi, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		if err != nil {
			i++
			continue
		}
		switch {
		case hi >= 0xD800 && hi < 0xDC00: // must be followed by a low surrogate
			if i+12 <= len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				if lo, err := strconv.ParseUint(string(raw[i+8:i+12]), 16, 16); err == nil && lo >= 0xDC00 && lo < 0xE000 {
					i += 11
					continue
				}
			}
			return fmt.Sprintf("holds the escape %s of a lone UTF-16 surrogate (not a character)", raw[i:i+6])
		case hi >= 0xDC00 && hi < 0xE000:
			return fmt.Sprintf("holds the escape %s of a lone UTF-16 surrogate (not a character)", raw[i:i+6])
		}
		i += 5
	}
	return ""
}

// ReadFile reads the JSON file path, refusing a file larger than maxBytes
// (before reading it), one that is not valid JSON, and one that Check
// finds something wrong in. Errors name the file (and the path inside it).
func ReadFile(path string, maxBytes int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if st.Size() > maxBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d such a file may have", path, st.Size(), maxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("%s: more than the %d bytes such a file may have", path, maxBytes)
	}
	if !json.Valid(data) {
		var v json.RawMessage
		if err := json.NewDecoder(bytes.NewReader(data)).Decode(&v); err == nil {
			return nil, fmt.Errorf("%s: data after the first JSON value", path)
		}
		err := json.Unmarshal(data, &v)
		return nil, fmt.Errorf("%s: bad JSON: %v", path, err)
	}
	if where, problem, ok := Check(data); !ok {
		if where == "" {
			return nil, fmt.Errorf("%s: %s", path, problem)
		}
		return nil, fmt.Errorf("%s: %s: %s", path, where, problem)
	}
	return data, nil
}
