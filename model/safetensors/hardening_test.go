package safetensors

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stHeaderFile writes a safetensors file with the given JSON header and
// data bytes.
func stHeaderFile(t *testing.T, header string, data int) string {
	t.Helper()
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(append(b, header...), make([]byte, data)...)
	p := filepath.Join(t.TempDir(), "x.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSafetensorsHeaderOverflowIsAnError: an optimizer.safetensors
// declaring shape [4294967296, 4294967296] (2⁶⁴ elements: the product wraps
// to 0, which matched empty data_offsets) is refused as needing more bytes
// than the file holds, as are the header's other ways to claim what the
// file does not have.
func TestSafetensorsHeaderOverflowIsAnError(t *testing.T) {
	cases := []struct {
		name, header string
		data         int
		want         string
	}{
		{"2^64 elements", `{"exp_avg/w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 16, "needs more than the 16 bytes of data"},
		{"2^62 elements", `{"w":{"dtype":"F32","shape":[2147483648,2147483648],"data_offsets":[0,0]}}`, 16, "needs more than"},
		{"more than the file", `{"w":{"dtype":"F32","shape":[5],"data_offsets":[0,20]}}`, 16, "needs more than the 16 bytes"},
		{"too many dimensions", `{"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}}`, 16, "more than 8 dimensions"},
		{"three offsets", `{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, 16, "data_offsets must be [begin, end]"},
		{"tensor given twice", `{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 16, "w: given twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := stHeaderFile(t, c.header, c.data)
			_, err := ReadFloat32(p)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %v, want one naming %s and saying %q", err, p, c.want)
			}
			if _, err := ReadShapes(p); err == nil {
				t.Fatal("ReadShapes read it")
			}
		})
	}
}
