package eval

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDecodeDecisions: any decisions.jsonl text either decodes, each
// decision valid and the whole passing Check or not, or is an error naming
// its line — never a panic; a decoded decision written back decodes the
// same. The seeds include a key given twice and invalid UTF-8.
func FuzzDecodeDecisions(f *testing.F) {
	var good bytes.Buffer
	for _, d := range handMade() {
		b, _ := json.Marshal(d)
		good.Write(append(b, '\n'))
	}
	f.Add(good.Bytes())
	f.Add([]byte(goodLine + "\n"))
	f.Add([]byte(strings.Replace(goodLine, `"label":0,`, `"label":1,"label":0,`, 1)))
	f.Add([]byte(strings.Replace(goodLine, `"suite":"`, "\"suite\":\"\xff", 1)))
	f.Add([]byte("\n\nnull\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ds []Decision
		err := DecodeDecisions(bytes.NewReader(data), "d.jsonl", func(line int, d Decision) error {
			if err := d.Validate(); err != nil {
				t.Fatalf("line %d decoded but does not validate: %v", line, err)
			}
			b, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			again, err := parseDecision(b)
			if err != nil {
				t.Fatalf("line %d written back as %s does not decode: %v", line, b, err)
			}
			if b2, _ := json.Marshal(again); !bytes.Equal(b, b2) {
				t.Fatalf("round trip: %s != %s", b, b2)
			}
			ds = append(ds, d)
			return nil
		})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "d.jsonl line ") {
				t.Fatalf("error %q does not name the line", err)
			}
			return
		}
		Check(ds) // may fail; must not panic
	})
}

// FuzzReadReport: any report.json either reads — and then writes back
// to the same report — or is an error; never a panic.
func FuzzReadReport(f *testing.F) {
	good, err := MarshalReport(Compute(handMade(), 2))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(strings.Replace(string(good), `"n_skipped": 2,`, `"n_skipped": 2, "n_skipped": 3,`, 1)))
	f.Add([]byte(`{}`))
	f.Add(append(append([]byte{}, good...), "{}"...))
	path := filepath.Join(f.TempDir(), "report.json") // a worker runs its inputs one at a time
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := ReadReport(path)
		if err != nil {
			return
		}
		out, err := MarshalReport(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		again, err := ReadReport(path)
		if err != nil {
			t.Fatalf("a report written back does not read: %v", err)
		}
		if out2, _ := MarshalReport(again); !bytes.Equal(out, out2) {
			t.Fatal("round trip changed the report")
		}
	})
}
