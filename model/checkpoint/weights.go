// Package checkpoint reads and writes the files of a Hugging Face checkpoint
// directory: the weights (model.safetensors, or shards listed in
// model.safetensors.index.json), the tokenizer files, and the directory as
// a whole, written so that a crash never leaves half of it. It knows no
// architecture: the weights are named tensors (package model/safetensors),
// the other files bytes; package model maps them to Qwen3's variables and
// its config.json.
package checkpoint

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/internal/strictjson"
	"github.com/mageguard/mageguard/model/safetensors"
)

// Names of the weight files of a checkpoint directory.
const (
	WeightsFile = "model.safetensors"            // the weights in one file
	IndexFile   = "model.safetensors.index.json" // which shard holds which tensor, when sharded
)

// maxIndexBytes bounds model.safetensors.index.json (Qwen3-235B's is ~2 MB).
const maxIndexBytes = 64 << 20

// index is model.safetensors.index.json.
type index struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// Weights are the open safetensors files of a checkpoint, each tensor name
// mapped to the file that holds it. Every header has been checked against
// its file's size; no data has been read.
type Weights struct {
	dir   string
	files []*safetensors.File
	where map[string]*safetensors.File
}

// OpenWeights opens the safetensors files of the checkpoint in dir: the
// shards model.safetensors.index.json lists (each must hold the tensors
// mapped to it, and list every tensor it holds), or else
// model.safetensors. A tensor in two files is an error.
func OpenWeights(dir string) (w *Weights, err error) {
	w = &Weights{dir: dir, where: map[string]*safetensors.File{}}
	defer func() {
		if err != nil {
			w.Close()
			w = nil
		}
	}()
	indexPath := filepath.Join(dir, IndexFile)
	_, ierr := os.Stat(indexPath)
	switch {
	case ierr == nil:
		return w, w.openShards(indexPath)
	case os.IsNotExist(ierr):
		f, err := safetensors.Open(filepath.Join(dir, WeightsFile))
		if err != nil {
			return w, err
		}
		return w, w.add(f)
	default:
		return w, fmt.Errorf("checkpoint: %w", ierr)
	}
}

// add adds an open file to w (which closes it).
func (w *Weights) add(f *safetensors.File) error {
	w.files = append(w.files, f)
	for _, name := range f.Names() {
		if other, dup := w.where[name]; dup {
			return fmt.Errorf("checkpoint %s: tensor %s is in both %s and %s", w.dir, name, other.Path(), f.Path())
		}
		w.where[name] = f
	}
	return nil
}

// openShards opens the shards the index at indexPath lists.
func (w *Weights) openShards(indexPath string) error {
	data, err := strictjson.ReadFile(indexPath, maxIndexBytes)
	if err != nil {
		return fmt.Errorf("checkpoint index: %w", err)
	}
	var idx index
	if err := json.Unmarshal(data, &idx); err != nil {
		return fmt.Errorf("checkpoint index %s: %w", indexPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return fmt.Errorf("checkpoint index %s: empty weight_map", indexPath)
	}
	byFile := map[string]*safetensors.File{}
	for _, name := range slices.Sorted(maps.Keys(idx.WeightMap)) {
		file := idx.WeightMap[name]
		if file != filepath.Base(file) {
			return fmt.Errorf("checkpoint index %s: tensor %s: shard %q must be a file name in the checkpoint directory", indexPath, name, file)
		}
		if _, ok := byFile[file]; !ok {
			f, err := safetensors.Open(filepath.Join(w.dir, file))
			if err != nil {
				return err
			}
			byFile[file] = f
			if err := w.add(f); err != nil {
				return err
			}
		}
		if _, ok := byFile[file].Entry(name); !ok {
			return fmt.Errorf("checkpoint index %s: tensor %s is mapped to %s, which does not hold it", indexPath, name, file)
		}
	}
	for name, f := range w.where {
		if _, listed := idx.WeightMap[name]; !listed {
			return fmt.Errorf("checkpoint index %s: tensor %s in %s is not listed in weight_map", indexPath, name, f.Path())
		}
	}
	return nil
}

// Names returns the names of every tensor of the checkpoint, sorted.
func (w *Weights) Names() []string { return slices.Sorted(maps.Keys(w.where)) }

// File returns the file that holds tensor name, or nil.
func (w *Weights) File(name string) *safetensors.File { return w.where[name] }

// Files returns the open files, in the order they were opened.
func (w *Weights) Files() []*safetensors.File { return w.files }

// ReadInto reads tensor name into dst (safetensors.File.ReadInto).
func (w *Weights) ReadInto(name string, dst *tensors.Tensor) error {
	f := w.where[name]
	if f == nil {
		return fmt.Errorf("checkpoint %s: no tensor %s", w.dir, name)
	}
	return f.ReadInto(name, dst)
}

// Close closes every file.
func (w *Weights) Close() error {
	var first error
	for _, f := range w.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	w.files = nil
	return first
}
