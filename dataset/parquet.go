package dataset

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/internal/parquetcheck"
)

// The Parquet layout: one row per trajectory with the fields of the JSON
// schema; turns is a LIST of structs; nullable fields are OPTIONAL columns.
// Arguments, an arbitrary JSON object, is stored as a string column with the
// JSON logical type holding the compact JSON text (Parquet has no column type
// for arbitrary nested JSON), so it round-trips byte for byte.
type pqTrajectory struct {
	ID              string   `parquet:"id"`
	Source          string   `parquet:"source,dict"`
	Suite           string   `parquet:"suite,dict"`
	UserTaskID      string   `parquet:"user_task_id,dict"`
	InjectionTaskID *string  `parquet:"injection_task_id,optional,dict"`
	AttackType      *string  `parquet:"attack_type,optional,dict"`
	Model           string   `parquet:"model,dict"`
	UserPrompt      string   `parquet:"user_prompt"`
	Turns           []pqTurn `parquet:"turns,list"`
	Utility         *bool    `parquet:"utility,optional"`
	Security        *bool    `parquet:"security,optional"`
	Tools           []pqTool `parquet:"tools,list"` // a file without these columns (written before them) reads as no tools
}

type pqTool struct {
	Name        string `parquet:"name"`
	Description string `parquet:"description"`
	Parameters  string `parquet:"parameters,json"` // "" = none
}

type pqTurn struct {
	User        *string  `parquet:"user,optional"`
	Action      pqAction `parquet:"action"`
	Observation string   `parquet:"observation"`
	Label       int32    `parquet:"label"`
	LabelSource string   `parquet:"label_source,optional,dict"` // absent from files written before it existed
	LabelNote   string   `parquet:"label_note,optional"`
}

// optionalColumns may be missing from a file (written before they existed);
// they read as null.
var optionalColumns = map[string]bool{
	"turns.list.element.label_source": true,
	"turns.list.element.label_note":   true,
}

type pqAction struct {
	Name      string `parquet:"name,dict"`
	Arguments string `parquet:"arguments,json"`
}

const parquetBatch = 256

// parquetReader reads rows in batches and validates each.
type parquetReader struct {
	path string
	f    *os.File
	r    *parquet.GenericReader[pqTrajectory]
	buf  []pqTrajectory
	i, n int
	row  int
	eof  bool
	ids  idSet
}

func openParquet(path string) (_ *parquetReader, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// Everything parquet-go will decode is checked first, against the
	// file's real size (internal/parquetcheck); what it still panics on
	// becomes an error naming the file.
	if _, err := parquetcheck.Check(f, fi.Size()); err != nil {
		return nil, &Error{File: path, Err: fmt.Errorf("not a readable Parquet file: %w", err)}
	}
	defer func() {
		if p := recover(); p != nil {
			err = &Error{File: path, Err: fmt.Errorf("not a readable Parquet file: %v", p)}
		}
	}()
	pf, err := parquet.OpenFile(f, fi.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, &Error{File: path, Err: fmt.Errorf("not a readable Parquet file: %w", err)}
	}
	if err := checkParquetSchema(pf.Schema()); err != nil {
		return nil, &Error{File: path, Field: err.Field, Err: fmt.Errorf("%s", err.Msg)}
	}
	r := parquet.NewGenericReader[pqTrajectory](pf)
	return &parquetReader{path: path, f: f, r: r, buf: make([]pqTrajectory, parquetBatch), ids: idSet{}}, nil
}

// checkParquetSchema requires the columns of the trajectory schema and no
// others, each with the physical type it is read as (an INT64 label read
// into int32 would lose its high bits without a word), no more optional
// than the schema allows (a null read into a required field would become
// "" or 0) and repeated the same way.
func checkParquetSchema(s *parquet.Schema) *FieldError {
	want := parquet.SchemaOf(new(pqTrajectory))
	for _, path := range want.Columns() {
		name := strings.Join(path, ".")
		got, ok := s.Lookup(path...)
		if !ok && (optionalColumns[name] || path[0] == "tools") {
			continue // optional: read as empty (no tools, no label source)
		}
		if !ok {
			return fieldErr(fieldOfColumn(path), "missing column %q", name)
		}
		exp, _ := want.Lookup(path...)
		if gk, wk := got.Node.Type().Kind(), exp.Node.Type().Kind(); gk != wk {
			return fieldErr(fieldOfColumn(path), "column %q is %s, want %s (values are never narrowed or converted)", name, gk, wk)
		}
		if got.MaxRepetitionLevel != exp.MaxRepetitionLevel {
			return fieldErr(fieldOfColumn(path), "column %q is nested in %d repeated groups, want %d", name, got.MaxRepetitionLevel, exp.MaxRepetitionLevel)
		}
		if got.MaxDefinitionLevel > exp.MaxDefinitionLevel {
			return fieldErr(fieldOfColumn(path), "column %q may hold nulls (%d optional levels) where the schema has %d", name, got.MaxDefinitionLevel, exp.MaxDefinitionLevel)
		}
	}
	for _, path := range s.Columns() {
		if _, ok := want.Lookup(path...); !ok {
			return fieldErr(fieldOfColumn(path), "unknown column %q", strings.Join(path, "."))
		}
	}
	return nil
}

// fieldOfColumn maps a Parquet column path (turns.list.element.label) to the
// JSON field path (turns[].label).
func fieldOfColumn(path []string) string {
	s := strings.Join(path, ".")
	return strings.ReplaceAll(s, ".list.element", "[]")
}

func (r *parquetReader) Pos() string { return fmt.Sprintf("row %d", r.row) }

func (r *parquetReader) Close() error {
	r.r.Close()
	return r.f.Close()
}

func (r *parquetReader) Next() (*Trajectory, error) {
	if r.i == r.n {
		if r.eof {
			return nil, io.EOF
		}
		n, err := r.read()
		r.i, r.n = 0, n
		if err == io.EOF {
			r.eof = true
		} else if err != nil {
			return nil, &Error{File: r.path, Row: r.row + 1, Err: err}
		}
		if n == 0 {
			return nil, io.EOF
		}
	}
	p := &r.buf[r.i]
	r.i++
	r.row++
	t, err := fromParquet(p)
	if err == nil {
		err = t.Validate()
	}
	if err == nil {
		err = r.ids.add(t.ID, r.Pos())
	}
	if err != nil {
		return nil, wrapRecordErr(r.path, 0, r.row, err)
	}
	return t, nil
}

func (r *parquetReader) read() (n int, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("corrupt Parquet data: %v", p)
		}
	}()
	clear(r.buf)
	return r.r.Read(r.buf)
}

func fromParquet(p *pqTrajectory) (*Trajectory, error) {
	t := &Trajectory{
		ID: p.ID, Source: p.Source, Suite: p.Suite, UserTaskID: p.UserTaskID,
		InjectionTaskID: p.InjectionTaskID, AttackType: p.AttackType, Model: p.Model,
		UserPrompt: p.UserPrompt, Utility: p.Utility, Security: p.Security,
		Turns: make([]Turn, len(p.Turns)),
	}
	for i, pt := range p.Turns {
		tu := &t.Turns[i]
		tu.User = pt.User
		tu.Action.Name = pt.Action.Name
		tu.Observation = pt.Observation
		tu.Label = int(pt.Label)
		tu.LabelSource, tu.LabelNote = pt.LabelSource, pt.LabelNote
		if ferr := checkArguments(json.RawMessage(pt.Action.Arguments)); ferr != nil {
			return nil, fieldErr(fmt.Sprintf("turns[%d].action.arguments", i), "%s", ferr.Msg)
		}
		args, err := compactJSON([]byte(pt.Action.Arguments))
		if err != nil {
			return nil, fieldErr(fmt.Sprintf("turns[%d].action.arguments", i), "%v", err)
		}
		tu.Action.Arguments = args
	}
	for i, pt := range p.Tools {
		tool := Tool{Name: pt.Name, Description: pt.Description}
		if pt.Parameters != "" {
			params, err := compactJSON([]byte(pt.Parameters))
			if err != nil {
				return nil, fieldErr(fmt.Sprintf("tools[%d].parameters", i), "%v", err)
			}
			tool.Parameters = params
		}
		t.Tools = append(t.Tools, tool)
	}
	return t, nil
}

func toParquet(t *Trajectory) pqTrajectory {
	p := pqTrajectory{
		ID: t.ID, Source: t.Source, Suite: t.Suite, UserTaskID: t.UserTaskID,
		InjectionTaskID: t.InjectionTaskID, AttackType: t.AttackType, Model: t.Model,
		UserPrompt: t.UserPrompt, Utility: t.Utility, Security: t.Security,
		Turns: make([]pqTurn, len(t.Turns)),
	}
	for i, tu := range t.Turns {
		p.Turns[i] = pqTurn{User: tu.User, Observation: tu.Observation, Label: int32(tu.Label),
			LabelSource: tu.LabelSource, LabelNote: tu.LabelNote,
			Action: pqAction{Name: tu.Action.Name, Arguments: string(tu.Action.Arguments)}}
	}
	for _, tool := range t.Tools {
		p.Tools = append(p.Tools, pqTool{Name: tool.Name, Description: tool.Description, Parameters: string(tool.Parameters)})
	}
	return p
}

// parquetWriter buffers rows and writes them in batches (zstd-compressed).
type parquetWriter struct {
	af  *atomicfile.File
	w   *parquet.GenericWriter[pqTrajectory]
	buf []pqTrajectory
	ids idSet
	n   int
}

func newParquetWriter(af *atomicfile.File) *parquetWriter {
	w := parquet.NewGenericWriter[pqTrajectory](af,
		parquet.Compression(&zstd.Codec{}),
		parquet.MaxRowsPerRowGroup(2048),
	)
	return &parquetWriter{af: af, w: w, ids: idSet{}}
}

func (w *parquetWriter) Count() int { return w.n }

func (w *parquetWriter) Write(t *Trajectory) error {
	if err := t.Validate(); err != nil {
		return wrapRecordErr(w.af.Path(), 0, w.n+1, err)
	}
	if err := w.ids.add(t.ID, fmt.Sprintf("row %d", w.n+1)); err != nil {
		return wrapRecordErr(w.af.Path(), 0, w.n+1, err)
	}
	w.buf = append(w.buf, toParquet(t))
	w.n++
	if len(w.buf) >= parquetBatch {
		return w.flush()
	}
	return nil
}

func (w *parquetWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	if _, err := w.w.Write(w.buf); err != nil {
		return &Error{File: w.af.Path(), Err: err}
	}
	clear(w.buf)
	w.buf = w.buf[:0]
	return nil
}

func (w *parquetWriter) Close() error {
	if err := w.flush(); err != nil {
		w.af.Abort()
		return err
	}
	if err := w.w.Close(); err != nil {
		w.af.Abort()
		return &Error{File: w.af.Path(), Err: err}
	}
	return w.af.Commit()
}

func (w *parquetWriter) Abort() { w.af.Abort() }
