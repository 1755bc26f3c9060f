package safetensors

import (
	"fmt"
	"maps"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// WriteFloat32 writes named float32 tensors (e.g. an optimizer's state) to
// a safetensors file at path, in name order, atomically (temporary name,
// then rename).
func WriteFloat32(path string, ts map[string]*tensors.Tensor) error {
	var out []Tensor
	for _, name := range slices.Sorted(maps.Keys(ts)) {
		t := ts[name]
		if t.DType() != dtypes.Float32 {
			return fmt.Errorf("safetensors %s: tensor %s is %s, want float32", path, name, t.DType())
		}
		out = append(out, Tensor{Name: name, DType: F32, Shape: t.Shape().Dimensions, Src: t})
	}
	return Write(path, out, nil)
}

// ReadShapes reads the header of a safetensors file (checked against the
// file's size) and returns each tensor's shape, so that a caller can check
// them against what it expects before anything is allocated.
func ReadShapes(path string) (map[string][]int, error) {
	st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	out := map[string][]int{}
	for name, e := range st.entries {
		out[name] = append([]int{}, e.Shape...)
	}
	return out, nil
}

// ReadFloat32 reads every tensor of a safetensors file as float32. A
// tensor holding NaN or ±Inf is an error (*NonFiniteError).
func ReadFloat32(path string) (map[string]*tensors.Tensor, error) {
	st, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	out := map[string]*tensors.Tensor{}
	for name, e := range st.entries {
		t := tensors.FromShape(shapes.Make(dtypes.Float32, e.Shape...))
		if err := st.ReadInto(name, t); err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}
