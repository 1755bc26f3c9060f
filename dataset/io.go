package dataset

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/mageguard/mageguard/internal/atomicfile"
)

// Error is a bad record or a bad file: it names the file, the line (JSONL,
// 1-based) or row (Parquet, 1-based) when known, and the field when known.
type Error struct {
	File  string
	Line  int    // 1-based JSONL line; 0 when not applicable
	Row   int    // 1-based Parquet row; 0 when not applicable
	Field string // e.g. "turns[2].label"; "" when not known
	Err   error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	switch {
	case e.Line > 0:
		fmt.Fprintf(&b, ":%d", e.Line)
	case e.Row > 0:
		fmt.Fprintf(&b, ": row %d", e.Row)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString("field " + e.Field + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// wrapRecordErr turns a *FieldError (or any error) about one record into an *Error.
func wrapRecordErr(file string, line, row int, err error) *Error {
	var fe *FieldError
	if errors.As(err, &fe) {
		return &Error{File: file, Line: line, Row: row, Field: fe.Field, Err: errors.New(fe.Msg)}
	}
	return &Error{File: file, Line: line, Row: row, Err: err}
}

// Format is a file format of trajectories.
type Format int

const (
	JSONL Format = iota + 1
	Parquet
)

// FormatOf returns the format of path by its extension (.jsonl or .parquet).
func FormatOf(path string) (Format, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl":
		return JSONL, nil
	case ".parquet":
		return Parquet, nil
	}
	return 0, fmt.Errorf("%s: unknown trajectory file format %q (want .jsonl or .parquet)", path, filepath.Ext(path))
}

// Reader streams the trajectories of one file. Every record is validated, and
// ids must be unique within the file.
type Reader interface {
	// Next returns the next trajectory, or io.EOF after the last one. Any
	// other error is an *Error naming the file, line or row, and field.
	Next() (*Trajectory, error)
	// Pos returns the 1-based line (JSONL) or row (Parquet) of the record last
	// returned by Next, for messages about it.
	Pos() string
	Close() error
}

// Open opens path for reading, choosing the format by its extension.
func Open(path string) (Reader, error) {
	format, err := FormatOf(path)
	if err != nil {
		return nil, err
	}
	switch format {
	case Parquet:
		return openParquet(path)
	default:
		return openJSONL(path)
	}
}

// Writer writes trajectories to a temporary file beside its target. Close
// commits (renames the temporary file to the target); Abort, or any failed
// Write or Close, removes the temporary file, so the target is either the
// complete new file or untouched.
type Writer interface {
	// Write validates t and appends it. A second record with an id already
	// written is an error.
	Write(t *Trajectory) error
	// Close finishes the file and renames it to its target.
	Close() error
	// Abort discards everything written. It is a no-op after Close.
	Abort()
	// Count returns the number of records written so far.
	Count() int
}

// Create opens a writer for path, choosing the format by its extension. The
// directory must exist.
func Create(path string) (Writer, error) {
	format, err := FormatOf(path)
	if err != nil {
		return nil, err
	}
	af, err := atomicfile.Create(path)
	if err != nil {
		return nil, err
	}
	if format == Parquet {
		return newParquetWriter(af), nil
	}
	return newJSONLWriter(af), nil
}

// ReadAll reads every trajectory of path.
func ReadAll(path string) ([]*Trajectory, error) {
	r, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []*Trajectory
	for {
		t, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
}

// WriteAll writes trajs to path (atomically: all or nothing).
func WriteAll(path string, trajs []*Trajectory) error {
	w, err := Create(path)
	if err != nil {
		return err
	}
	defer w.Abort()
	for _, t := range trajs {
		if err := w.Write(t); err != nil {
			return err
		}
	}
	return w.Close()
}

// idSet rejects duplicate ids, remembering where each was first seen.
type idSet map[string]string

func (s idSet) add(id, pos string) error {
	if first, ok := s[id]; ok {
		return fieldErr("id", "duplicate id %q (first at %s)", id, first)
	}
	s[id] = pos
	return nil
}
