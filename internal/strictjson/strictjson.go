// Package strictjson finds what encoding/json lets through without a word
// in a valid JSON text: a key given twice in one object (the last value
// silently wins), invalid UTF-8 in a string (it becomes U+FFFD, or stays
// raw inside a json.RawMessage) and escapes of lone UTF-16 surrogates such
// as "\ud800" (also U+FFFD). Every reader of outside JSON (trajectories,
// safetensors headers, config.json, trainer_state.json, decisions.jsonl,
// report.json) runs Check after the text parsed.
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode/utf8"
)

// Check returns the path of the first key given twice, string with invalid
// UTF-8 or escaped lone surrogate in the JSON text b (e.g.
// "turns[0].label"; "" for the top level) and what is wrong with it, or
// ok. Call it on a text that parsed (json.Unmarshal or json.Valid), so its
// nesting depth is bounded by encoding/json's; on a text that does not
// parse it reports ok up to the syntax error, which the caller reports.
func Check(b []byte) (path, problem string, ok bool) {
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
