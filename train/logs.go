package train

// What a run writes as it goes: JSON lines (metrics.jsonl, rollouts.jsonl)
// and the progress line.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/mageguard/mageguard/internal/atomicfile"
)

// jsonlFile appends JSON lines to a file, flushing each line.
type jsonlFile struct {
	f *os.File
	w *bufio.Writer
}

// openJSONL opens path for appending. Lines of steps after `keep` (left by
// a run that was interrupted after its last checkpoint) are dropped first,
// so a resumed run's file reads as one uninterrupted run's.
func openJSONL(path string, keep int) (*jsonlFile, error) {
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	var kept bytes.Buffer
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		var s struct {
			Step int `json:"step"`
		}
		if len(bytes.TrimSpace(line)) == 0 || json.Unmarshal(line, &s) != nil || s.Step > keep {
			continue
		}
		if !bytes.HasSuffix(line, []byte("\n")) {
			continue // a torn last line
		}
		kept.Write(line)
	}
	if !bytes.Equal(kept.Bytes(), data) {
		if err := atomicfile.WriteFile(path, kept.Bytes()); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &jsonlFile{f: f, w: bufio.NewWriter(f)}, nil
}

func (j *jsonlFile) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	j.w.Write(b)
	j.w.WriteByte('\n')
	if err := j.w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", j.f.Name(), err)
	}
	return nil
}

func (j *jsonlFile) close() {
	j.w.Flush()
	j.f.Close()
}

// progress prints one step's summary, with the held-out F1, ASR and BU on
// eval steps: an updating line on a terminal, plain lines otherwise.
func (r *run) progress(step int, m record) {
	T := r.opts.Train.Steps
	eta := time.Duration(m.elapsed() / float64(max(step-r.firstStep()+1, 1)) * float64(T-step) * float64(time.Second))
	line := fmt.Sprintf("step %d/%d  %s  ETA %s", step, T, m.summary(), eta.Round(time.Second))
	if isTerminal(r.log) {
		fmt.Fprintf(r.log, "\r\033[K%s", line)
		if step == T {
			fmt.Fprintln(r.log)
		}
		return
	}
	fmt.Fprintln(r.log, line)
}

// evalSummary is the held-out F1, ASR and BU of an eval step for the
// progress line ("" without an eval).
func evalSummary(ev map[string]any) string {
	if ev == nil {
		return ""
	}
	f := func(k string) string {
		if v, ok := ev[k].(float64); ok {
			return fmt.Sprintf("%.3f", v)
		}
		return "null"
	}
	return fmt.Sprintf("  held-out F1 %s ASR %s BU %s", f("f1"), f("asr"), f("bu"))
}

func (r *run) firstStep() int { return r.resumedFrom + 1 }

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
