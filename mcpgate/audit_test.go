package mcpgate

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// failingFile is an audit log's file that fails on cue: a write that
// writes half its bytes and fails (a full disk), a sync that fails, a
// truncation that fails (truncFails times).
type failingFile struct {
	*os.File
	mu         sync.Mutex
	failWrite  bool
	failSync   bool
	truncFails int
}

func (f *failingFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWrite {
		n, _ := f.File.Write(p[:len(p)/2])
		return n, errors.New("no space left on device")
	}
	return f.File.Write(p)
}

func (f *failingFile) Sync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failSync {
		return errors.New("sync: input/output error")
	}
	return f.File.Sync()
}

func (f *failingFile) Truncate(n int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.truncFails > 0 {
		f.truncFails--
		return errors.New("truncate: input/output error")
	}
	return f.File.Truncate(n)
}

func (f *failingFile) set(failWrite, failSync bool, truncFails int) {
	f.mu.Lock()
	f.failWrite, f.failSync, f.truncFails = failWrite, failSync, truncFails
	f.mu.Unlock()
}

// failing replaces a's file with a failingFile over it.
func failing(a *Audit) *failingFile {
	f := &failingFile{File: a.f.(*os.File)}
	a.f = f
	return f
}

// TestAuditRecordIsWholeOrAbsent: a write that fails — half written, or
// written but not synced, or with its truncation failing once — leaves
// nothing of its record in the log; the next record is a line of its own
// (before, it was appended to the fragment: one unparseable line). While
// the fragment cannot be removed, writes fail.
func TestAuditRecordIsWholeOrAbsent(t *testing.T) {
	cases := []struct {
		name                string
		failWrite, failSync bool
		truncFails          int
		wantRecovered       bool // the write right after the failure succeeds
	}{
		{"short write", true, false, 0, true},
		{"failed sync", false, true, 0, true},
		{"short write, truncation fails once", true, false, 1, true},
		{"short write, truncation fails twice", true, false, 2, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.jsonl")
			a, err := OpenAudit(path)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			f := failing(a)
			if err := a.Write(&Record{Event: EventDecision, Tool: "one"}); err != nil {
				t.Fatal(err)
			}
			f.set(c.failWrite, c.failSync, c.truncFails)
			if err := a.Write(&Record{Event: EventDecision, Tool: "two", Rationale: strings.Repeat("r", 200)}); err == nil {
				t.Fatal("a failed write reported no error")
			}
			f.set(false, false, f.truncFails)
			err = a.Write(&Record{Event: EventDecision, Tool: "three"})
			if (err == nil) != c.wantRecovered {
				t.Fatalf("the write after the failure: %v, want recovered %v", err, c.wantRecovered)
			}
			if err != nil {
				if err := a.Write(&Record{Event: EventDecision, Tool: "three"}); err != nil {
					t.Fatalf("once the truncation works: %v", err)
				}
			}
			recs, err := ReadAudit(path)
			if err != nil {
				t.Fatal(err)
			}
			var tools []string
			for _, r := range recs {
				tools = append(tools, r.Tool)
			}
			if !slices.Equal(tools, []string{"one", "three"}) {
				t.Errorf("records %v, want [one three]", tools)
			}
			data, _ := os.ReadFile(path)
			if bytes.Count(data, []byte("\n")) != 2 || data[len(data)-1] != '\n' {
				t.Errorf("the log is not two whole lines: %q", data)
			}
		})
	}
}

// TestOpenAuditCutsATornTail: a log whose last line lacks its newline (a
// write cut by a crash) is cut back to its last whole record when opened,
// so the next record is a line of its own.
func TestOpenAuditCutsATornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	whole := `{"event":"decision","tool":"one","mcp_session":"m","forwarded":true}` + "\n"
	if err := os.WriteFile(path, []byte(whole+`{"event":"decision","tool":"tw`), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Write(&Record{Event: EventDecision, Tool: "three"}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	recs, err := ReadAudit(path)
	if err != nil || len(recs) != 2 || recs[0].Tool != "one" || recs[1].Tool != "three" {
		t.Fatalf("%+v %v", recs, err)
	}
}

// TestReadAuditNamesDamagedLinesAndReadsOn: a line that is not a record
// is reported by number, and the records after it are read (before, the
// reader stopped at the first).
func TestReadAuditNamesDamagedLinesAndReadsOn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	lines := []string{
		`{"event":"decision","tool":"a","mcp_session":"m","forwarded":false}`,
		`{"event":"decision","tool":"b","mcp_ses{"event":"outcome","tool":"c"}`, // a fragment with a record on it
		`{"event":"outcome","tool":"d","mcp_session":"m","forwarded":true}`,
		``,
		`null`,
		`{"event":"decision","tool":"e","mcp_session":"m","forwarded":true}`,
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadAudit(path)
	var de *DamagedError
	if !errors.As(err, &de) {
		t.Fatalf("err %v, want a *DamagedError", err)
	}
	var nums []int
	for _, l := range de.Lines {
		nums = append(nums, l.Line)
	}
	if !slices.Equal(nums, []int{2, 4, 5}) || !strings.Contains(err.Error(), "line 2: ") {
		t.Errorf("damaged lines %v (%v), want [2 4 5]", nums, err)
	}
	var tools []string
	for _, r := range recs {
		tools = append(tools, r.Tool)
	}
	if !slices.Equal(tools, []string{"a", "d", "e"}) {
		t.Errorf("records %v, want [a d e]", tools)
	}
}

// TestDecodeAuditSkipsALongLine: a line over MaxAuditLine is reported
// without being held, and the next line is read.
func TestDecodeAuditSkipsALongLine(t *testing.T) {
	long := `{"tool":"` + strings.Repeat("x", MaxAuditLine) + `"}`
	in := long + "\n" + `{"event":"outcome","tool":"z"}` + "\n"
	recs, damaged, err := DecodeAudit(strings.NewReader(in))
	if err != nil || len(recs) != 1 || recs[0].Tool != "z" || len(damaged) != 1 || damaged[0].Line != 1 ||
		!strings.Contains(damaged[0].Err, "longer than") {
		t.Fatalf("%d records, damaged %+v, %v", len(recs), damaged, err)
	}
}

// FuzzDecodeAudit: whatever the bytes, DecodeAudit neither panics nor
// fails, and every line is either a record or a damaged line.
func FuzzDecodeAudit(f *testing.F) {
	f.Add([]byte(`{"event":"decision","tool":"a","forwarded":true}` + "\n"))
	f.Add([]byte(`{"event":"decision","to` + "\n" + `{"tool":"b"}`))
	f.Add([]byte("\n\n[1]\n\"x\"\n{}\n"))
	f.Add([]byte(`{"time":"2026-01-01T00:00:00Z","step":3,"score":0.5,"arguments":{"a":[1,2]},"is_error":true}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, damaged, err := DecodeAudit(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.Count(data, []byte("\n"))
		if len(data) > 0 && data[len(data)-1] != '\n' {
			lines++
		}
		if len(recs)+len(damaged) != lines {
			t.Fatalf("%d records + %d damaged, %d lines", len(recs), len(damaged), lines)
		}
		for i := 1; i < len(damaged); i++ {
			if damaged[i].Line <= damaged[i-1].Line {
				t.Fatalf("damaged lines out of order: %+v", damaged)
			}
		}
	})
}

// TestACallWhoseRecordCannotBeWrittenIsNotRun: when the decision record
// of a call cannot be written — an allowed call, enforcing or monitor; a
// blocked one; a call to an unknown tool — the downstream is not called
// and the client is told why; the log holds no fragment, and once the
// disk has room again the next call is audited and run.
func TestACallWhoseRecordCannotBeWrittenIsNotRun(t *testing.T) {
	cases := []struct {
		name    string
		monitor bool
		tool    string
		args    map[string]any
	}{
		{"allowed, enforcing", false, "read_file", map[string]any{"path": "notes.txt"}},
		{"allowed, monitor", true, "read_file", map[string]any{"path": "notes.txt"}},
		{"blocked, monitor", true, "write_file", map[string]any{"path": "x", "content": "y"}},
		{"blocked, enforcing", false, "write_file", map[string]any{"path": "x", "content": "y"}},
		{"unknown tool", false, "nope", map[string]any{}},
		{"bad arguments", false, "read_file", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			h := newHarness(t, Options{Monitor: c.monitor, Task: "Summarise notes.txt"})
			f := failing(h.gw.opts.Audit)
			cl := h.connect(ctx)
			f.set(true, false, 0)
			var args any = c.args
			if c.args == nil {
				args = []int{1}
			}
			res, err := cl.call(ctx, c.tool, args, nil)
			if err != nil || !res.IsError || !strings.Contains(text(res), "the audit log could not be written") ||
				!strings.Contains(text(res), "no space left on device") {
				t.Fatalf("%v %+v", err, res)
			}
			if got := h.down.called(); len(got) != 0 {
				t.Errorf("the downstream ran %v", got)
			}
			f.set(false, false, 0)
			if recs := h.records(); len(recs) != 0 {
				t.Errorf("the log holds %+v", recs)
			}
			res, err = cl.call(ctx, "read_file", map[string]any{"path": "notes.txt"}, nil)
			if c.name == "blocked, enforcing" {
				if err != nil || !res.IsError || !strings.Contains(text(res), "this session is blocked") {
					t.Fatalf("after the blocked call: %v %+v", err, res)
				}
				return
			}
			if err != nil || res.IsError {
				t.Fatalf("once the disk has room: %v %+v", err, res)
			}
			if recs := h.records(); len(recs) != 2 || !recs[0].Forwarded || recs[1].Event != EventOutcome {
				t.Errorf("records %+v", recs)
			}
		})
	}
}
