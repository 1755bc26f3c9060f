package safetensors

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTensorDataMustBeContiguous: tensors' byte ranges must tile the data
// from 0 to its end; overlaps (which loaded before: the format and Hugging
// Face's loader refuse them), gaps, a late start and a tail are refused,
// naming the tensors.
func TestTensorDataMustBeContiguous(t *testing.T) {
	e := func(begin, end int64) Entry { return Entry{DType: F32, Offsets: [2]int64{begin, end}} }
	cases := []struct {
		name    string
		entries map[string]Entry
		dataLen int64
		want    string // "" when valid
	}{
		{"tiled", map[string]Entry{"b": e(8, 24), "a": e(0, 8), "c": e(24, 32)}, 32, ""},
		{"with an empty tensor", map[string]Entry{"a": e(0, 8), "z": e(8, 8), "b": e(8, 16)}, 16, ""},
		{"none", map[string]Entry{}, 0, ""},
		{"overlap", map[string]Entry{"a": e(0, 16), "b": e(8, 24)}, 24, "tensor b (data bytes [8, 24)) overlaps tensor a, which ends at byte 16"},
		{"the same bytes twice", map[string]Entry{"a": e(0, 8), "b": e(0, 8)}, 8, "tensor b (data bytes [0, 8)) overlaps tensor a"},
		{"a gap", map[string]Entry{"a": e(0, 8), "b": e(12, 20)}, 20, "tensor b begins at data byte 12, not where tensor a ends (8): 4 bytes belong to no tensor"},
		{"a late start", map[string]Entry{"a": e(4, 8)}, 8, "tensor a begins at data byte 4: the first tensor must begin at 0"},
		{"a tail", map[string]Entry{"a": e(0, 8)}, 12, "the tensors' data ends at byte 8, but the file holds 12 bytes of data"},
	}
	for _, c := range cases {
		err := checkContiguous(c.entries, c.dataLen)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestOverlappingTensorsAreRefusedAtOpen: a file whose two tensors share
// their bytes is refused when it is opened.
func TestOverlappingTensorsAreRefusedAtOpen(t *testing.T) {
	header := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	data := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	data = append(append(data, header...), make([]byte, 8)...)
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := Open(path)
	if err == nil {
		st.Close()
	}
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "tensor b (data bytes [0, 8)) overlaps tensor a") {
		t.Errorf("open: %v", err)
	}
}
