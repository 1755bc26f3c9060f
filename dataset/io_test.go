package dataset

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

const sample = "testdata/sample.jsonl"

func TestReadSample(t *testing.T) {
	ts, err := ReadAll(sample)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 4 {
		t.Fatalf("read %d records, want 4 (blank lines skipped)", len(ts))
	}
	a := ts[0]
	if !a.IsAttack() || a.Positives() != 1 || *a.Security != true || a.Utility == nil || *a.Utility {
		t.Errorf("attack record: %+v", a)
	}
	// Arguments are kept exactly: key order, number spelling, nested values.
	want := `{"recipient":"US133000000121212121212","amount":10.0,"subject":"Spotify & <b>music</b>","date":"2022-01-01","big":12345678901234567890,"exp":1e-7,"nested":{"b":[1,{"c":null}],"a":true}}`
	if got := string(a.Turns[1].Action.Arguments); got != want {
		t.Errorf("arguments\n got %s\nwant %s", got, want)
	}
	// label_source and label_note are optional: absent reads as "".
	if l0, l1 := a.Turns[0], a.Turns[1]; l0.LabelSource != "" || l0.LabelNote != "" ||
		l1.LabelSource != LabelHuman || l1.LabelNote != "sends money to the attacker's IBAN" {
		t.Errorf("label sources: %+v, %+v", l0, l1)
	}
	b := ts[1]
	if b.IsAttack() || b.AttackType != nil || b.Security != nil || b.Kind() != "benign" {
		t.Errorf("benign record: %+v", b)
	}
	if len(ts[2].Turns) != 0 || ts[2].Turns == nil {
		t.Errorf("empty turns: %#v", ts[2].Turns)
	}
	u := ts[3]
	if u.Utility != nil || u.Security != nil || u.Turns[0].User != nil || u.Turns[1].User == nil || *u.Turns[1].User != "also book it" {
		t.Errorf("user record: %+v", u)
	}
}

// JSONL -> Parquet -> JSONL gives equal records, arguments included, and the
// two JSONL files are byte-identical.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	a, err := ReadAll(sample)
	if err != nil {
		t.Fatal(err)
	}
	j1 := filepath.Join(dir, "a.jsonl")
	pq := filepath.Join(dir, "b.parquet")
	j2 := filepath.Join(dir, "c.jsonl")
	if err := WriteAll(j1, a); err != nil {
		t.Fatal(err)
	}
	b, err := ReadAll(j1)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteAll(pq, b); err != nil {
		t.Fatal(err)
	}
	c, err := ReadAll(pq)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteAll(j2, c); err != nil {
		t.Fatal(err)
	}
	d, err := ReadAll(j2)
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range [][]*Trajectory{b, c, d} {
		if len(set) != len(a) {
			t.Fatalf("%d records, want %d", len(set), len(a))
		}
		for i := range a {
			if !Equal(a[i], set[i]) {
				t.Errorf("record %d changed:\n%+v\n%+v", i, a[i], set[i])
			}
			for k := range a[i].Turns {
				if !bytes.Equal(a[i].Turns[k].Action.Arguments, set[i].Turns[k].Action.Arguments) {
					t.Errorf("record %d turn %d arguments: %s != %s", i, k, a[i].Turns[k].Action.Arguments, set[i].Turns[k].Action.Arguments)
				}
			}
		}
	}
	x, _ := os.ReadFile(j1)
	y, _ := os.ReadFile(j2)
	if !bytes.Equal(x, y) {
		t.Errorf("JSONL after the Parquet round trip differs:\n%s\n%s", x, y)
	}
	if !strings.Contains(string(x), `"Spotify & <b>music</b>"`) {
		t.Errorf("writer escaped HTML characters: %s", x)
	}
}

func TestEqualComparesArgumentsAsJSON(t *testing.T) {
	a := &Trajectory{ID: "x", Turns: []Turn{{Action: Action{Name: "f", Arguments: []byte(`{"a": 10.0, "b": [1, 2]}`)}}}}
	b := &Trajectory{ID: "x", Turns: []Turn{{Action: Action{Name: "f", Arguments: []byte(`{"b":[1,2],"a":10}`)}}}}
	if !Equal(a, b) {
		t.Error("equal arguments reported different")
	}
	b.Turns[0].Action.Arguments = []byte(`{"b":[2,1],"a":10}`)
	if Equal(a, b) {
		t.Error("different arguments reported equal")
	}
}

const good = `{"id": "x", "source": "s", "suite": "banking", "user_task_id": "user_task_0", "injection_task_id": "injection_task_0", "attack_type": "a", "model": "m", "user_prompt": "p", "turns": [{"action": {"name": "f", "arguments": {"k": 1}}, "observation": "o", "label": 1}], "utility": true, "security": false}`

// Every bad input fails with an *Error naming the file, the line and the field.
func TestBadJSONL(t *testing.T) {
	benign := strings.Replace(good, `"injection_task_0"`, `null`, 1)
	cases := []struct {
		name, text string
		line       int
		field      string
		msg        string
	}{
		{"truncated line", good + "\n" + good[:len(good)/2] + "\n", 2, "", "truncated JSON"},
		{"truncated last line without newline", good[:40], 1, "", "truncated JSON"},
		{"not JSON", "{id: 1}\n", 1, "", "invalid JSON"},
		{"not an object", "[1, 2]\n", 1, "", "want a JSON object"},
		{"wrong type: id", strings.Replace(good, `"id": "x"`, `"id": 7`, 1), 1, "id", "want a string, got a number"},
		{"wrong type: turns", strings.Replace(good, `"turns": [{"action": {"name": "f", "arguments": {"k": 1}}, "observation": "o", "label": 1}]`, `"turns": "none"`, 1), 1, "turns", "want an array"},
		{"wrong type: utility", strings.Replace(good, `"utility": true`, `"utility": "yes"`, 1), 1, "utility", "want true, false or null"},
		{"wrong type: observation", strings.Replace(good, `"observation": "o"`, `"observation": null`, 1), 1, "turns[0].observation", "want a string"},
		{"wrong type: label", strings.Replace(good, `"label": 1`, `"label": "1"`, 1), 1, "turns[0].label", "must be 0 or 1"},
		{"missing label", strings.Replace(good, `, "label": 1`, ``, 1), 1, "turns[0].label", "missing"},
		{"label 2", strings.Replace(good, `"label": 1`, `"label": 2`, 1), 1, "turns[0].label", "must be 0 or 1, got 2"},
		{"label 0.5", strings.Replace(good, `"label": 1`, `"label": 0.5`, 1), 1, "turns[0].label", "must be 0 or 1"},
		{"label true", strings.Replace(good, `"label": 1`, `"label": true`, 1), 1, "turns[0].label", "must be 0 or 1"},
		{"missing id", strings.Replace(good, `"id": "x", `, ``, 1), 1, "id", "missing"},
		{"empty suite", strings.Replace(good, `"suite": "banking"`, `"suite": ""`, 1), 1, "suite", "must not be empty"},
		{"duplicate id", good + "\n" + good + "\n", 2, "id", `duplicate id "x" (first at line 1)`},
		{"unknown field", strings.Replace(good, `"model": "m"`, `"model": "m", "lable": 1`, 1), 1, "lable", "unknown field"},
		{"unknown turn field", strings.Replace(good, `"label": 1`, `"label": 1, "labels": [1]`, 1), 1, "turns[0].labels", "unknown field"},
		{"arguments not an object", strings.Replace(good, `{"k": 1}`, `["k"]`, 1), 1, "turns[0].action.arguments", "want a JSON object, got an array"},
		{"arguments null", strings.Replace(good, `{"k": 1}`, `null`, 1), 1, "turns[0].action.arguments", "want a JSON object, got null"},
		{"missing action name", strings.Replace(good, `"name": "f", `, ``, 1), 1, "turns[0].action.name", "missing"},
		{"label 1 in a benign run", benign, 1, "turns[0].label", "benign run"},
		{"unknown label_source", strings.Replace(good, `"label": 1`, `"label": 1, "label_source": "oracle"`, 1), 1, "turns[0].label_source", `must be one of human, judge, rules, guard, assumed, synth, got "oracle"`},
		{"empty label_source", strings.Replace(good, `"label": 1`, `"label": 1, "label_source": ""`, 1), 1, "turns[0].label_source", `must be one of`},
		{"label_source not a string", strings.Replace(good, `"label": 1`, `"label": 1, "label_source": 1`, 1), 1, "turns[0].label_source", "want a string, got a number"},
		{"label_note not a string", strings.Replace(good, `"label": 1`, `"label": 1, "label_note": ["x"]`, 1), 1, "turns[0].label_note", "want a string, got an array"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.jsonl")
			os.WriteFile(p, []byte(c.text), 0o644)
			_, err := ReadAll(p)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v (%T), want *dataset.Error", err, err)
			}
			if e.File != p || e.Line != c.line || e.Field != c.field || !strings.Contains(e.Error(), c.msg) {
				t.Errorf("error %q: file %q line %d field %q; want line %d field %q msg %q", e, e.File, e.Line, e.Field, c.line, c.field, c.msg)
			}
			if !strings.HasPrefix(e.Error(), p+":") {
				t.Errorf("error %q does not start with the file name", e)
			}
		})
	}
}

// writeRawParquet writes rows with the Parquet layout but without validation.
func writeRawParquet[T any](t *testing.T, rows []T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bad.parquet")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[T](f)
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return p
}

func TestBadParquet(t *testing.T) {
	ok := func(id string, label int32) pqTrajectory {
		inj := "injection_task_0"
		return pqTrajectory{ID: id, Source: "s", Suite: "banking", UserTaskID: "user_task_0", InjectionTaskID: &inj, Model: "m",
			Turns: []pqTurn{{Action: pqAction{Name: "f", Arguments: `{"a":1}`}, Label: label}}}
	}
	t.Run("label 2", func(t *testing.T) {
		p := writeRawParquet(t, []pqTrajectory{ok("a", 0), ok("b", 2)})
		_, err := ReadAll(p)
		var e *Error
		if !errors.As(err, &e) || e.Row != 2 || e.Field != "turns[0].label" || !strings.Contains(err.Error(), "row 2") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("duplicate id", func(t *testing.T) {
		p := writeRawParquet(t, []pqTrajectory{ok("a", 0), ok("a", 0)})
		_, err := ReadAll(p)
		var e *Error
		if !errors.As(err, &e) || e.Row != 2 || e.Field != "id" {
			t.Errorf("error %v", err)
		}
	})
	t.Run("arguments not JSON", func(t *testing.T) {
		r := ok("a", 0)
		r.Turns[0].Action.Arguments = `{"a":`
		p := writeRawParquet(t, []pqTrajectory{r})
		_, err := ReadAll(p)
		var e *Error
		if !errors.As(err, &e) || e.Row != 1 || e.Field != "turns[0].action.arguments" {
			t.Errorf("error %v", err)
		}
	})
	t.Run("missing label column", func(t *testing.T) {
		type turn struct {
			Action      pqAction `parquet:"action"`
			Observation string   `parquet:"observation"`
		}
		type row struct {
			ID         string `parquet:"id"`
			Source     string `parquet:"source"`
			Suite      string `parquet:"suite"`
			UserTaskID string `parquet:"user_task_id"`
			Model      string `parquet:"model"`
			UserPrompt string `parquet:"user_prompt"`
			Turns      []turn `parquet:"turns,list"`
		}
		p := writeRawParquet(t, []row{{ID: "a", Source: "s", Suite: "b", UserTaskID: "u", Model: "m"}})
		_, err := ReadAll(p)
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), "missing column") {
			t.Errorf("error %v", err)
		}
	})
	t.Run("unknown label_source", func(t *testing.T) {
		r := ok("a", 1)
		r.Turns[0].LabelSource = "oracle"
		p := writeRawParquet(t, []pqTrajectory{r})
		_, err := ReadAll(p)
		var e *Error
		if !errors.As(err, &e) || e.Row != 1 || e.Field != "turns[0].label_source" || !strings.Contains(err.Error(), `got "oracle"`) {
			t.Errorf("error %v", err)
		}
	})
	t.Run("not a Parquet file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "x.parquet")
		os.WriteFile(p, []byte("PAR1 nope"), 0o644)
		_, err := ReadAll(p)
		var e *Error
		if !errors.As(err, &e) || e.File != p {
			t.Errorf("error %v", err)
		}
	})
}

// A Parquet file written before turns carried label_source and label_note
// (no such columns) still reads, with both empty.
func TestParquetWithoutLabelSourceColumns(t *testing.T) {
	type turn struct {
		User        *string  `parquet:"user,optional"`
		Action      pqAction `parquet:"action"`
		Observation string   `parquet:"observation"`
		Label       int32    `parquet:"label"`
	}
	type row struct {
		ID              string  `parquet:"id"`
		Source          string  `parquet:"source,dict"`
		Suite           string  `parquet:"suite,dict"`
		UserTaskID      string  `parquet:"user_task_id,dict"`
		InjectionTaskID *string `parquet:"injection_task_id,optional,dict"`
		AttackType      *string `parquet:"attack_type,optional,dict"`
		Model           string  `parquet:"model,dict"`
		UserPrompt      string  `parquet:"user_prompt"`
		Turns           []turn  `parquet:"turns,list"`
		Utility         *bool   `parquet:"utility,optional"`
		Security        *bool   `parquet:"security,optional"`
	}
	inj := "injection_task_0"
	p := writeRawParquet(t, []row{{ID: "a", Source: "s", Suite: "b", UserTaskID: "u", InjectionTaskID: &inj, Model: "m",
		Turns: []turn{{Action: pqAction{Name: "f", Arguments: `{"x":1}`}, Observation: "o", Label: 1}}}})
	ts, err := ReadAll(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || len(ts[0].Turns) != 1 {
		t.Fatalf("read %+v", ts)
	}
	if tu := ts[0].Turns[0]; tu.Label != 1 || tu.LabelSource != "" || tu.LabelNote != "" || string(tu.Action.Arguments) != `{"x":1}` {
		t.Errorf("turn %+v", tu)
	}
}

func TestUnknownExtension(t *testing.T) {
	if _, err := Open("x.csv"); err == nil || !strings.Contains(err.Error(), ".jsonl or .parquet") {
		t.Errorf("error %v", err)
	}
	if _, err := Create(filepath.Join(t.TempDir(), "x.json")); err == nil {
		t.Error("Create accepted .json")
	}
}

// A failed write leaves no output file (and no temporary file); an existing
// target is untouched.
func TestWriterIsAtomic(t *testing.T) {
	ts, err := ReadAll(sample)
	if err != nil {
		t.Fatal(err)
	}
	bad := *ts[0]
	bad.Turns = append([]Turn(nil), ts[0].Turns...)
	bad.Turns[0].Label = 3
	for _, ext := range []string{".jsonl", ".parquet"} {
		t.Run(ext, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out"+ext)
			err := WriteAll(out, []*Trajectory{ts[1], &bad})
			var e *Error
			if !errors.As(err, &e) || e.Field != "turns[0].label" {
				t.Errorf("error %v", err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("files left behind: %v", entries)
			}
			// An existing file survives a failed rewrite.
			if err := WriteAll(out, ts[:2]); err != nil {
				t.Fatal(err)
			}
			if err := WriteAll(out, []*Trajectory{ts[0], ts[0]}); err == nil || !strings.Contains(err.Error(), "duplicate id") {
				t.Errorf("duplicate ids written: %v", err)
			}
			got, err := ReadAll(out)
			if err != nil || len(got) != 2 {
				t.Errorf("existing file damaged: %d records, %v", len(got), err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("files left behind: %v", entries)
			}
		})
	}
}
