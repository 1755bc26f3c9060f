package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// checkJSONText finds what encoding/json would let through silently in a
// valid JSON text b: a key given twice in one object (the last value
// would win), invalid UTF-8 in a string (it would become U+FFFD, or stay
// raw inside RawMessage arguments) and escapes of lone UTF-16 surrogates
// such as "\ud800" (also turned into U+FFFD). It returns the path of the
// first such value (e.g. "turns[0].label", "" for the top level) and what
// is wrong, or ok. b must already have parsed (so its nesting depth is
// bounded by encoding/json's).
func checkJSONText(b []byte) (path, problem string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var stack []*jsonFrame
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return "", "", true // io.EOF, or a syntax error the caller reports
		}
		raw := b[start:dec.InputOffset()]
		var top *jsonFrame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, isDelim := tok.(json.Delim); isDelim && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				stack[len(stack)-1].advance()
			}
			continue
		}
		if top != nil && top.object && top.wantKey { // a key
			k := tok.(string)
			p := joinPath(top.path, k)
			if msg := badText(raw); msg != "" {
				return p, "key " + msg, false
			}
			if top.keys[k] {
				return p, "given twice in one object (the last value would silently win)", false
			}
			top.keys[k] = true
			top.wantKey, top.key = false, p
			continue
		}
		p := ""
		if top != nil {
			p = top.valuePath()
		}
		switch v := tok.(type) {
		case json.Delim: // '{' or '['
			stack = append(stack, &jsonFrame{path: p, object: v == '{', keys: map[string]bool{}, wantKey: v == '{'})
			continue
		case string:
			if msg := badText(raw); msg != "" {
				return p, msg, false
			}
		}
		if top != nil {
			top.advance()
		}
	}
}

// jsonFrame is an object or array being walked by checkJSONText.
type jsonFrame struct {
	path    string
	object  bool
	keys    map[string]bool // object: the keys seen
	wantKey bool            // object: the next token is a key
	key     string          // object: the path of the value being read
	index   int             // array: the index of the next element
}

// valuePath is the path of the value about to be read in f.
func (f *jsonFrame) valuePath() string {
	if f.object {
		return f.key
	}
	return f.path + "[" + strconv.Itoa(f.index) + "]"
}

// advance moves f past the value that just ended.
func (f *jsonFrame) advance() {
	if f.object {
		f.wantKey = true
	} else {
		f.index++
	}
}

// joinPath appends an object key to a path.
func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// badText describes what is wrong with the raw bytes of one JSON string
// token (and the separators before it): invalid UTF-8, or an escaped lone
// surrogate; "" when nothing.
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
