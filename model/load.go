package model

// Loading a Hugging Face checkpoint directory (package model/checkpoint
// opens its files) into a Model's variables.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/model/checkpoint"
	"github.com/mageguard/mageguard/model/safetensors"
)

// Load reads a Hugging Face Qwen3 checkpoint directory (config.json and
// model.safetensors, or shards listed in model.safetensors.index.json) into
// a float32 model. F32, BF16 and F16 weights are upcast exactly.
func Load(backend backends.Backend, dir string) (*Model, error) {
	return LoadAs(backend, dir, dtypes.Float32)
}

// LoadAs is Load with the weights stored (and computed) in dtype: Float32,
// or BFloat16 (F32/F16 weights rounded to nearest even). A checkpoint with
// a NaN or infinite weight is refused (LoadWith can allow it).
func LoadAs(backend backends.Backend, dir string, dtype dtypes.DType) (*Model, error) {
	return LoadWith(backend, dir, LoadOptions{DType: dtype})
}

// LoadOptions say how LoadWith loads a checkpoint.
type LoadOptions struct {
	DType dtypes.DType // Float32 or BFloat16; InvalidDType (the zero value) means Float32
	// AllowNonFinite loads weights that hold NaN or ±Inf, with a warning,
	// instead of refusing them (model.allow_non_finite). Such a model's
	// logits are NaN: its decisions mean nothing.
	AllowNonFinite bool
	Log            io.Writer // where the warning goes; nil = os.Stderr
}

// LoadWith reads a Hugging Face Qwen3 checkpoint directory (config.json and
// model.safetensors, or shards listed in model.safetensors.index.json).
// Before anything is allocated, config.json is checked (every architecture
// key in range) and every tensor the architecture needs is found in the
// safetensors headers with its shape, each header checked against its
// file's real size; then the weights are read one tensor at a time, and a
// tensor holding NaN or ±Inf is an error naming it (unless
// opts.AllowNonFinite).
func LoadWith(backend backends.Backend, dir string, opts LoadOptions) (*Model, error) {
	dtype := opts.DType
	if dtype == dtypes.InvalidDType {
		dtype = dtypes.Float32
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	m, err := newModel(backend, cfg, dtype)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	w, err := checkpoint.OpenWeights(dir)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	specs := tensorSpecs(&m.cfg)
	if err := checkTensors(dir, w, specs); err != nil {
		return nil, err
	}
	expected := map[string]bool{}
	for _, s := range specs {
		expected[s.name] = true
	}
	for _, name := range w.Names() {
		if expected[name] || (m.cfg.TieWordEmbeddings && name == "lm_head.weight") {
			continue // a tied checkpoint may still carry lm_head.weight; transformers ignores it too
		}
		return nil, fmt.Errorf("safetensors %s: unexpected tensor %s for this config (wrong config.json?)", w.File(name).Path(), name)
	}
	nonFinite, err := m.readWeights(dir, w, specs, opts.AllowNonFinite)
	if err != nil {
		return nil, err
	}
	if len(nonFinite) > 0 {
		log := opts.Log
		if log == nil {
			log = os.Stderr
		}
		var n int64
		for _, nf := range nonFinite {
			n += nf.Count
		}
		fmt.Fprintf(log, "model: warning: checkpoint %s holds %d non-finite weights in %d tensors (first: %v); "+
			"loaded anyway because model.allow_non_finite is set: its outputs will be NaN\n", dir, n, len(nonFinite), nonFinite[0])
	}
	return m, nil
}

// checkTensors checks that the checkpoint in dir holds every tensor of
// specs, with its shape.
func checkTensors(dir string, w *checkpoint.Weights, specs []tensorSpec) error {
	for _, s := range specs {
		f := w.File(s.name)
		if f == nil {
			return fmt.Errorf("checkpoint %s: tensor %s is missing", dir, s.name)
		}
		if e, _ := f.Entry(s.name); !slices.Equal(e.Shape, s.shape) {
			return fmt.Errorf("safetensors %s: tensor %s has shape %v, the config wants %v", f.Path(), s.name, e.Shape, s.shape)
		}
	}
	return nil
}

// readWeights reads the tensors of specs from w into m's variables, one at
// a time, on m's backend. Tensors holding NaN or ±Inf are an error, or,
// with allowNonFinite, loaded and returned.
func (m *Model) readWeights(dir string, w *checkpoint.Weights, specs []tensorSpec, allowNonFinite bool) ([]*safetensors.NonFiniteError, error) {
	var garbage int64 // bytes of host copies released since the last collection
	var nonFinite []*safetensors.NonFiniteError
	for _, s := range specs {
		t := tensors.FromShape(shapes.Make(m.dtype, s.shape...))
		shared := m.backend.HasSharedBuffers()
		if shared {
			// Move the (still untouched, zero) storage to a backend buffer first:
			// ReadInto then writes straight into the memory the model runs on.
			if err := t.MaterializeOnDevice(m.backend, true, 0); err != nil {
				return nil, fmt.Errorf("checkpoint %s: tensor %s: %w", dir, s.name, err)
			}
		}
		if err := w.ReadInto(s.name, t); err != nil {
			var nf *safetensors.NonFiniteError
			if !errors.As(err, &nf) {
				return nil, err
			}
			if !allowNonFinite {
				return nil, fmt.Errorf("checkpoint %s: %w: its outputs would be NaN and its decisions meaningless "+
					"(set model.allow_non_finite=true to load it anyway)", dir, err)
			}
			nonFinite = append(nonFinite, nf)
		}
		if !shared {
			// Copy to the device and drop the host copy.
			if err := t.MaterializeOnDevice(m.backend, false, 0); err != nil {
				return nil, fmt.Errorf("checkpoint %s: tensor %s: %w", dir, s.name, err)
			}
			t.FinalizeLocal()
		}
		m.setWeight(s.name, t)
		if garbage += int64(t.Memory()); garbage > 64<<20 {
			runtime.GC()
			garbage = 0
		}
	}
	return nonFinite, nil
}
