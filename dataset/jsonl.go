package dataset

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/internal/strictjson"
)

// jsonlReader reads one JSON object a line. Blank lines are skipped.
type jsonlReader struct {
	path string
	f    *os.File
	br   *bufio.Reader
	line int
	ids  idSet
}

func openJSONL(path string) (*jsonlReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &jsonlReader{path: path, f: f, br: bufio.NewReaderSize(f, 1<<20), ids: idSet{}}, nil
}

func (r *jsonlReader) Pos() string { return fmt.Sprintf("line %d", r.line) }

func (r *jsonlReader) Close() error { return r.f.Close() }

func (r *jsonlReader) Next() (*Trajectory, error) {
	for {
		b, err := r.br.ReadBytes('\n')
		if len(b) == 0 && err == io.EOF {
			return nil, io.EOF
		}
		if err != nil && err != io.EOF {
			return nil, &Error{File: r.path, Line: r.line + 1, Err: err}
		}
		r.line++
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		t, derr := DecodeJSON(b)
		if derr == nil {
			derr = t.Validate()
		}
		if derr == nil {
			derr = r.ids.add(t.ID, r.Pos())
		}
		if derr != nil {
			return nil, wrapRecordErr(r.path, r.line, 0, derr)
		}
		return t, nil
	}
}

// recordFields are the keys of a trajectory object, in schema order.
var recordFields = []string{"id", "source", "suite", "user_task_id", "injection_task_id", "attack_type",
	"model", "user_prompt", "turns", "utility", "security", "tools"}

// DecodeJSON decodes one trajectory object strictly: every required key
// present with its JSON type, no unknown keys, no key given twice in any
// object (arguments included), labels 0 or 1, arguments an object, every
// string valid UTF-8 with no escaped lone surrogate (encoding/json would
// turn them into U+FFFD without a word). Errors are *FieldError naming the
// field (or the JSON syntax error). It does not run Validate.
func DecodeJSON(b []byte) (*Trajectory, error) {
	obj, ok := strictjson.Members(b)
	if !ok {
		if !json.Valid(b) {
			return nil, syntaxErr(b)
		}
		return nil, fieldErr("", "record is %s, want a JSON object", strictjson.ValueKind(b))
	}
	if path, problem, ok := strictjson.Check(b); !ok {
		return nil, fieldErr(path, "%s", problem)
	}
	if k, unknown := strictjson.UnknownKey(obj, recordFields...); unknown {
		return nil, fieldErr(k, "unknown field")
	}
	t := &Trajectory{}
	var err error
	str := func(key string, dst *string) {
		if err == nil {
			err = reqString(obj, "", key, dst)
		}
	}
	str("id", &t.ID)
	str("source", &t.Source)
	str("suite", &t.Suite)
	str("user_task_id", &t.UserTaskID)
	str("model", &t.Model)
	str("user_prompt", &t.UserPrompt)
	if err != nil {
		return nil, err
	}
	if t.InjectionTaskID, err = optString(obj, "", "injection_task_id"); err != nil {
		return nil, err
	}
	if t.AttackType, err = optString(obj, "", "attack_type"); err != nil {
		return nil, err
	}
	if t.Utility, err = optBool(obj, "utility"); err != nil {
		return nil, err
	}
	if t.Security, err = optBool(obj, "security"); err != nil {
		return nil, err
	}
	if err := decodeTools(obj, t); err != nil {
		return nil, err
	}
	raw, ok := obj["turns"]
	if !ok {
		return nil, fieldErr("turns", "missing (want an array, possibly empty)")
	}
	var turns []json.RawMessage
	if err := json.Unmarshal(raw, &turns); err != nil || turns == nil {
		return nil, fieldErr("turns", "want an array, got %s", strictjson.ValueKind(raw))
	}
	t.Turns = make([]Turn, len(turns))
	for i, tr := range turns {
		if err := decodeTurn(tr, fmt.Sprintf("turns[%d]", i), &t.Turns[i]); err != nil {
			return nil, err
		}
	}
	return t, nil
}

var turnFields = []string{"user", "action", "observation", "label", "label_source", "label_note"}
var actionFields = []string{"name", "arguments"}

func decodeTurn(raw json.RawMessage, p string, tu *Turn) error {
	obj, ok := strictjson.Members(raw)
	if !ok {
		return fieldErr(p, "want an object, got %s", strictjson.ValueKind(raw))
	}
	if k, unknown := strictjson.UnknownKey(obj, turnFields...); unknown {
		return fieldErr(p+"."+k, "unknown field")
	}
	var err error
	if tu.User, err = optString(obj, p+".", "user"); err != nil {
		return err
	}
	araw, ok := obj["action"]
	if !ok {
		return fieldErr(p+".action", "missing")
	}
	act, ok := strictjson.Members(araw)
	if !ok {
		return fieldErr(p+".action", "want an object, got %s", strictjson.ValueKind(araw))
	}
	if k, unknown := strictjson.UnknownKey(act, actionFields...); unknown {
		return fieldErr(p+".action."+k, "unknown field")
	}
	if err := reqString(act, p+".action.", "name", &tu.Action.Name); err != nil {
		return err
	}
	args, ok := act["arguments"]
	if !ok {
		return fieldErr(p+".action.arguments", "missing (want a JSON object)")
	}
	if ferr := checkArguments(args); ferr != nil {
		return fieldErr(p+".action.arguments", "%s", ferr.Msg)
	}
	if tu.Action.Arguments, err = compactJSON(args); err != nil {
		return fieldErr(p+".action.arguments", "%v", err)
	}
	if err := reqString(obj, p+".", "observation", &tu.Observation); err != nil {
		return err
	}
	lraw, ok := obj["label"]
	if !ok {
		return fieldErr(p+".label", "missing (want 0 or 1)")
	}
	switch string(bytes.TrimSpace(lraw)) {
	case "0":
		tu.Label = 0
	case "1":
		tu.Label = 1
	default:
		return fieldErr(p+".label", "must be 0 or 1, got %s", bytes.TrimSpace(lraw))
	}
	for _, f := range []struct {
		key string
		dst *string
	}{{"label_source", &tu.LabelSource}, {"label_note", &tu.LabelNote}} {
		if _, ok := obj[f.key]; !ok {
			continue
		}
		if err := reqString(obj, p+".", f.key, f.dst); err != nil {
			return err
		}
	}
	if _, ok := obj["label_source"]; ok && !ValidLabelSource(tu.LabelSource) {
		return fieldErr(p+".label_source", "must be one of %s, got %q", strings.Join(LabelSources, ", "), tu.LabelSource)
	}
	return nil
}

func reqString(obj map[string]json.RawMessage, prefix, key string, dst *string) error {
	raw, ok := obj[key]
	if !ok {
		return fieldErr(prefix+key, "missing (want a string)")
	}
	if err := json.Unmarshal(raw, dst); err != nil || strictjson.ValueKind(raw) != "a string" {
		return fieldErr(prefix+key, "want a string, got %s", strictjson.ValueKind(raw))
	}
	return nil
}

// optString decodes a string or null; a missing key is null.
func optString(obj map[string]json.RawMessage, prefix, key string) (*string, error) {
	raw, ok := obj[key]
	if !ok || strictjson.ValueKind(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fieldErr(prefix+key, "want a string or null, got %s", strictjson.ValueKind(raw))
	}
	return &s, nil
}

// optBool decodes true, false or null; a missing key is null.
func optBool(obj map[string]json.RawMessage, key string) (*bool, error) {
	raw, ok := obj[key]
	if !ok || strictjson.ValueKind(raw) == "null" {
		return nil, nil
	}
	var v bool
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fieldErr(key, "want true, false or null, got %s", strictjson.ValueKind(raw))
	}
	return &v, nil
}

// syntaxErr describes why b is not valid JSON, naming the byte offset.
func syntaxErr(b []byte) error {
	err := json.Unmarshal(b, new(json.RawMessage))
	if err.Error() == "unexpected end of JSON input" {
		return fieldErr("", "truncated JSON (the line ends after %d bytes inside a value)", len(b))
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fieldErr("", "invalid JSON at byte %d: %v", se.Offset, se)
	}
	return fieldErr("", "invalid JSON: %v", err)
}

// jsonlWriter writes one compact JSON object a line, in schema key order.
type jsonlWriter struct {
	af  *atomicfile.File
	bw  *bufio.Writer
	ids idSet
	n   int
	buf bytes.Buffer
}

func newJSONLWriter(af *atomicfile.File) *jsonlWriter {
	return &jsonlWriter{af: af, bw: bufio.NewWriterSize(af, 1<<20), ids: idSet{}}
}

func (w *jsonlWriter) Count() int { return w.n }

func (w *jsonlWriter) Write(t *Trajectory) error {
	if err := t.Validate(); err != nil {
		return wrapRecordErr(w.af.Path(), w.n+1, 0, err)
	}
	if err := w.ids.add(t.ID, "line "+strconv.Itoa(w.n+1)); err != nil {
		return wrapRecordErr(w.af.Path(), w.n+1, 0, err)
	}
	w.buf.Reset()
	if err := EncodeJSON(&w.buf, t); err != nil {
		return &Error{File: w.af.Path(), Line: w.n + 1, Err: err}
	}
	if _, err := w.bw.Write(w.buf.Bytes()); err != nil {
		return &Error{File: w.af.Path(), Err: err}
	}
	w.n++
	return nil
}

func (w *jsonlWriter) Close() error {
	if err := w.bw.Flush(); err != nil {
		w.af.Abort()
		return &Error{File: w.af.Path(), Err: err}
	}
	return w.af.Commit()
}

func (w *jsonlWriter) Abort() { w.af.Abort() }

// EncodeJSON writes t as one compact JSON line (keys in schema order, no HTML
// escaping, "turns": [] for no turns) followed by a newline.
func EncodeJSON(buf *bytes.Buffer, t *Trajectory) error {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	rec := *t
	if rec.Turns == nil {
		rec.Turns = []Turn{}
	}
	return enc.Encode(&rec)
}
