package safetensors

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestFloatConversions pins the 16-bit conversions to hand-worked bit patterns.
func TestFloatConversions(t *testing.T) {
	bf := []struct {
		x    float32
		bits uint16
	}{
		{1, 0x3f80}, {-2, 0xc000}, {0, 0},
		{math.Float32frombits(0x3f808000), 0x3f80}, // exactly half-way, even below: stays
		{math.Float32frombits(0x3f818000), 0x3f82}, // half-way, odd below: rounds up to even
		{math.Float32frombits(0x3f808001), 0x3f81}, // above half-way: up
		{float32(math.Inf(1)), 0x7f80},
	}
	for _, c := range bf {
		if got := BF16FromFloat32(c.x).Bits(); got != c.bits {
			t.Errorf("bf16(%g) = %#04x, want %#04x", c.x, got, c.bits)
		}
	}
	f16 := []struct {
		x    float32
		bits uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {0.5, 0x3800}, {65504, 0x7bff}, {1e6, 0x7c00},
		{5.960464477539063e-08, 0x0001}, // smallest subnormal 2⁻²⁴
		{6.103515625e-05, 0x0400},       // smallest normal 2⁻¹⁴
		{1 + 1.0/2048, 0x3c00},          // half-way between 1 and 1+2⁻¹⁰: ties to even
		{1 + 3.0/2048, 0x3c02},          // half-way, odd below: up
	}
	for _, c := range f16 {
		if got := f16FromFloat32(c.x); got != c.bits {
			t.Errorf("f16(%g) = %#04x, want %#04x", c.x, got, c.bits)
		}
		if back := f16ToFloat32(c.bits); c.x <= 65504 && c.x != 1+1.0/2048 && c.x != 1+3.0/2048 && back != c.x {
			t.Errorf("f16 %#04x → %g, want %g", c.bits, back, c.x)
		}
	}
	if v := f16ToFloat32(0x7c00); !math.IsInf(float64(v), 1) {
		t.Errorf("f16 inf → %g", v)
	}
}

// TestSafetensorsRoundTrip writes F32, BF16 and F16 files and reads them
// back into float32 and bfloat16 tensors.
func TestSafetensorsRoundTrip(t *testing.T) {
	values := []float32{0, 1, -2.5, 0.1, 3.14159, -1e-3}
	src := tensors.FromFlatDataAndDimensions(values, 2, 3)
	for _, dt := range []string{F32, BF16, F16} {
		path := filepath.Join(t.TempDir(), "x.safetensors")
		if err := Write(path, []Tensor{{Name: "a.b", DType: dt, Shape: []int{2, 3}, Src: src}}, map[string]string{"format": "pt"}); err != nil {
			t.Fatal(err)
		}
		f, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, into := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
			dst := tensors.FromShape(shapes.Make(into, 2, 3))
			if err := f.ReadInto("a.b", dst); err != nil {
				t.Fatal(err)
			}
			var got []float32
			if into == dtypes.Float32 {
				got = tensors.MustCopyFlatData[float32](dst)
			} else {
				for _, b := range tensors.MustCopyFlatData[bfloat16.BFloat16](dst) {
					got = append(got, b.Float32())
				}
			}
			for i, v := range values {
				want := v // what the stored dtype, then the destination dtype, make of v
				switch dt {
				case BF16:
					want = BF16FromFloat32(v).Float32()
				case F16:
					want = f16ToFloat32(f16FromFloat32(v))
				}
				if into == dtypes.BFloat16 {
					want = BF16FromFloat32(want).Float32()
				}
				if got[i] != want {
					t.Errorf("%s → %s: element %d = %g, want %g", dt, into, i, got[i], want)
				}
			}
		}
		f.Close()
		// The data starts 8-byte aligned, as the Python writer does it.
		raw, _ := os.ReadFile(path)
		if hl := binary.LittleEndian.Uint64(raw); hl%8 != 0 {
			t.Errorf("%s: header length %d not a multiple of 8", dt, hl)
		}
	}
}

// TestSafetensorsBadFiles checks that damaged files fail with errors naming
// the file and, where there is one, the tensor.
func TestSafetensorsBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	src := tensors.FromFlatDataAndDimensions([]float32{1, 2, 3, 4}, 2, 2)
	if err := Write(good, []Tensor{{Name: "w", DType: F32, Shape: []int{2, 2}, Src: src}}, nil); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	hlen := binary.LittleEndian.Uint64(raw)
	header := func(entry string) []byte {
		h := []byte(`{"w":` + entry + `}`)
		out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		return append(append(out, h...), make([]byte, 16)...)
	}
	cases := []struct {
		name string
		data []byte
		want []string
	}{
		{"truncated data", raw[:len(raw)-4], []string{"tensor w", "truncated"}},
		{"truncated header", raw[:8+hlen/2], []string{"header length"}},
		{"too short", raw[:5], []string{"too short"}},
		{"bad json", append(binary.LittleEndian.AppendUint64(nil, 4), []byte("{{{{")...), []string{"bad JSON"}},
		{"unknown dtype", header(`{"dtype":"I8","shape":[2,2],"data_offsets":[0,4]}`), []string{"tensor w", "I8"}},
		{"offsets vs shape", header(`{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}`), []string{"tensor w", "data_offsets"}},
	}
	for _, c := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".safetensors")
		if err := os.WriteFile(path, c.data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(path)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range append(c.want, path) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not mention %q", c.name, err, w)
			}
		}
	}
}
