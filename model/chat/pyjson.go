package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// The chat template writes tools and tool-call arguments with Jinja's
// `tojson` filter, which Hugging Face implements as Python's
// json.dumps(x, ensure_ascii=False): ", " and ": " separators, keys in their
// given order, non-ASCII characters as they are, floats as Python's repr.
// This file reproduces that from a JSON text.

// jsonValue is a parsed JSON value that keeps the order of object keys.
type jsonValue struct {
	kind   byte        // '{', '[', 's' (string), 'n' (number), 'b' (bool), '0' (null)
	str    string      // string content, or number literal
	b      bool        // boolean value
	keys   []string    // object keys, in order of first appearance
	values []jsonValue // object values (parallel to keys) or array items
}

// pyJSON returns raw written as Python's json.dumps(json.loads(raw),
// ensure_ascii=False) would write it.
func pyJSON(raw []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := parseValue(dec)
	if err != nil {
		return "", err
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", errors.New("json: data after the value")
	}
	var b strings.Builder
	writeValue(&b, v)
	return b.String(), nil
}

func parseValue(dec *json.Decoder) (jsonValue, error) {
	tok, err := dec.Token()
	if err != nil {
		return jsonValue{}, fmt.Errorf("json: %w", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := jsonValue{kind: '{'}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return v, fmt.Errorf("json: %w", err)
				}
				key := kt.(string) // the decoder only yields string keys
				val, err := parseValue(dec)
				if err != nil {
					return v, err
				}
				// A repeated key keeps its first place and takes the last
				// value, as in a Python dict.
				if i := indexOf(v.keys, key); i >= 0 {
					v.values[i] = val
				} else {
					v.keys = append(v.keys, key)
					v.values = append(v.values, val)
				}
			}
			_, err := dec.Token() // '}'
			return v, err
		case '[':
			v := jsonValue{kind: '['}
			for dec.More() {
				val, err := parseValue(dec)
				if err != nil {
					return v, err
				}
				v.values = append(v.values, val)
			}
			_, err := dec.Token() // ']'
			return v, err
		}
		return jsonValue{}, fmt.Errorf("json: unexpected %v", t)
	case string:
		return jsonValue{kind: 's', str: t}, nil
	case json.Number:
		return jsonValue{kind: 'n', str: string(t)}, nil
	case bool:
		return jsonValue{kind: 'b', b: t}, nil
	case nil:
		return jsonValue{kind: '0'}, nil
	}
	return jsonValue{}, fmt.Errorf("json: unexpected token %v", tok)
}

func indexOf(keys []string, key string) int {
	for i, k := range keys {
		if k == key {
			return i
		}
	}
	return -1
}

func writeValue(b *strings.Builder, v jsonValue) {
	switch v.kind {
	case '{':
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeString(b, k)
			b.WriteString(": ")
			writeValue(b, v.values[i])
		}
		b.WriteByte('}')
	case '[':
		b.WriteByte('[')
		for i, item := range v.values {
			if i > 0 {
				b.WriteString(", ")
			}
			writeValue(b, item)
		}
		b.WriteByte(']')
	case 's':
		writeString(b, v.str)
	case 'n':
		b.WriteString(pyNumber(v.str))
	case 'b':
		b.WriteString(strconv.FormatBool(v.b))
	default:
		b.WriteString("null")
	}
}

// writeString writes s as a JSON string the way Python's json.dumps with
// ensure_ascii=False does: only '"', '\\' and control characters below
// U+0020 are escaped (\n, \r, \t, \b, \f by name, the others as \u00XX).
func writeString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xF])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// pyNumber writes a JSON number literal as Python would after json.loads:
// integers as they are (Python ints are exact), other numbers as the repr
// of a float64.
func pyNumber(lit string) string {
	if !strings.ContainsAny(lit, ".eE") {
		if lit == "-0" {
			return "0"
		}
		return lit
	}
	f, _ := strconv.ParseFloat(lit, 64) // ±Inf on overflow, as Python
	return pyFloat(f)
}

// pyFloat is Python's repr(float): the shortest digits that round-trip,
// in positional notation when the decimal exponent is in [-4, 16),
// otherwise in scientific notation with a two-digit exponent at least.
func pyFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	sign := ""
	if math.Signbit(f) {
		sign, f = "-", -f
	}
	// e is "d.ddde±XX": digits = "dddd", value = 0.dddd × 10^decpt.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, expStr, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp, _ := strconv.Atoi(expStr)
	decpt := exp + 1
	if f == 0 {
		return sign + "0.0"
	}
	if decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			return sign + "0." + strings.Repeat("0", -decpt) + digits
		case decpt >= len(digits):
			return sign + digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		default:
			return sign + digits[:decpt] + "." + digits[decpt:]
		}
	}
	s := digits[:1]
	if len(digits) > 1 {
		s += "." + digits[1:]
	}
	es := "+"
	if exp < 0 {
		es, exp = "-", -exp
	}
	return fmt.Sprintf("%s%se%s%02d", sign, s, es, exp)
}
