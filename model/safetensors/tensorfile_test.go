package safetensors

import (
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

func TestTensorFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "opt.safetensors")
	in := map[string]*tensors.Tensor{
		"exp_avg/a":    tensors.FromValue([][]float32{{1, -2.5, 3}, {4, 5, 6e-9}}),
		"exp_avg_sq/b": tensors.FromValue([]float32{0.25}),
	}
	if err := WriteFloat32(path, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadFloat32(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 {
		t.Fatalf("read %d tensors", len(out))
	}
	for name, want := range in {
		got := out[name]
		if got == nil || !got.Shape().Equal(want.Shape()) {
			t.Fatalf("%s: shape %v, want %v", name, got, want.Shape())
		}
		g, w := tensors.MustCopyFlatData[float32](got), tensors.MustCopyFlatData[float32](want)
		for i := range w {
			if g[i] != w[i] {
				t.Fatalf("%s[%d] = %v, want %v", name, i, g[i], w[i])
			}
		}
	}
	if err := WriteFloat32(path, map[string]*tensors.Tensor{"i": tensors.FromValue([]int32{1})}); err == nil {
		t.Fatal("an int32 tensor was written")
	}
}
