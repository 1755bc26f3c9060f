package safetensors

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// FuzzSafetensors: any file either opens, with every tensor then read in
// full, or is an error — never a panic or an allocation the file's size
// does not back. The seeds hold a header declaring shape
// [2³², 2³²] and a tensor with a NaN.
func FuzzSafetensors(f *testing.F) {
	file := func(header string, data []byte) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
		return append(append(b, header...), data...)
	}
	nan := binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(math.NaN())))
	f.Add(file(`{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`, make([]byte, 16)))
	f.Add(file(`{"exp_avg/w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, make([]byte, 16)))
	f.Add(file(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, nan))
	f.Add(file(`{"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},"__metadata__":{"format":"pt"}}`, make([]byte, 6)))
	f.Add(file(`{"w":{"dtype":"F16","shape":[],"data_offsets":[0,2]}}`, []byte{0, 0x7c}))
	path := filepath.Join(f.TempDir(), "f.safetensors") // a worker runs its inputs one at a time
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := Open(path)
		if err != nil {
			return
		}
		defer st.Close()
		var total int64
		for name, e := range st.entries {
			n := int64(1)
			for _, d := range e.Shape {
				n *= int64(d)
			}
			total += n * width[e.DType]
			if total > int64(len(data)) {
				t.Fatalf("the header declares %d bytes of tensors in a %d-byte file", total, len(data))
			}
			for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
				dst := tensors.FromShape(shapes.Make(dt, e.Shape...))
				st.ReadInto(name, dst) // an error (non-finite values) is fine
			}
		}
	})
}
