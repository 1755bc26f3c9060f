package dataset

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDecodeJSON: any line either decodes into a valid trajectory or is a
// *FieldError; a decoded one written back decodes to the same trajectory.
// The seeds hold the hardened cases (a label given twice, invalid UTF-8 in
// an observation and in the arguments).
func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte(strings.Replace(good, `"label": 1`, `"label": 1, "label": 0`, 1)))
	f.Add([]byte(strings.Replace(good, `"observation": "o"`, "\"observation\": \"o\xff\"", 1)))
	f.Add([]byte(strings.Replace(good, `{"k": 1}`, "{\"k\": \"\xfe\"}", 1)))
	f.Add([]byte(strings.Replace(good, `"user_prompt": "p"`, `"user_prompt": "\ud800"`, 1)))
	f.Add([]byte(`{"turns": [[[[[[[[[[]]]]]]]]]]}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		tr, err := DecodeJSON(line)
		if err == nil {
			err = tr.Validate()
		}
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FieldError", err, err)
			}
			return
		}
		var buf bytes.Buffer
		if err := EncodeJSON(&buf, tr); err != nil {
			t.Fatal(err)
		}
		again, err := DecodeJSON(buf.Bytes())
		if err != nil || !Equal(tr, again) {
			t.Fatalf("round trip of %q: %v", buf.Bytes(), err)
		}
	})
}

// FuzzParquet: any file either reads or is an *Error naming it — never a
// panic, a runaway allocation or a hang. The seeds are a small valid file
// and copies with a byte of the footer changed.
func FuzzParquet(f *testing.F) {
	trajs, err := ReadAll(sample)
	if err != nil {
		f.Fatal(err)
	}
	p := filepath.Join(f.TempDir(), "seed.parquet")
	if err := WriteAll(p, trajs); err != nil {
		f.Fatal(err)
	}
	seed, err := os.ReadFile(p)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	footer := len(seed) - 8 - int(uint32(seed[len(seed)-8])|uint32(seed[len(seed)-7])<<8)
	for _, i := range []int{footer + 10, footer + len(seed[footer:])/2, len(seed) - 30} {
		for _, v := range []byte{0xff, 14} {
			b := append([]byte(nil), seed...)
			b[i] = v
			f.Add(b)
		}
	}
	path := filepath.Join(f.TempDir(), "f.parquet") // a worker runs its inputs one at a time
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadAll(path)
		var e *Error
		if err != nil && (!errors.As(err, &e) || e.File != path) {
			t.Fatalf("error %v does not name the file", err)
		}
	})
}
