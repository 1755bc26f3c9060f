package model

import (
	"fmt"
	"maps"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// WriteTensorFile writes named float32 tensors (e.g. optimizer state) to a
// safetensors file at path, atomically (temporary name, then rename).
func WriteTensorFile(path string, ts map[string]*tensors.Tensor) error {
	names := slices.Sorted(maps.Keys(ts))
	var out []stTensor
	for _, name := range names {
		t := ts[name]
		if t.DType() != dtypes.Float32 {
			return fmt.Errorf("safetensors %s: tensor %s is %s, want float32", path, name, t.DType())
		}
		out = append(out, stTensor{name: name, dtype: stF32, shape: t.Shape().Dimensions, src: t})
	}
	return writeSafetensors(path, out, nil)
}

// TensorFileShapes reads the header of a safetensors file (checked against
// the file's size) and returns each tensor's shape, so that a caller can
// check them against what it expects before anything is allocated.
func TensorFileShapes(path string) (map[string][]int, error) {
	st, err := openSafetensors(path)
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

// ReadTensorFile reads every tensor of a safetensors file as float32. A
// tensor holding NaN or ±Inf is an error (*NonFiniteError).
func ReadTensorFile(path string) (map[string]*tensors.Tensor, error) {
	st, err := openSafetensors(path)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	out := map[string]*tensors.Tensor{}
	for name, e := range st.entries {
		t := tensors.FromShape(shapes.Make(dtypes.Float32, e.Shape...))
		if err := st.readInto(name, t); err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}
