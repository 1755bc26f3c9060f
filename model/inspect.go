package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mageguard/mageguard/internal/atomicfile"
)

// CheckpointInfo describes a checkpoint directory without loading its weights.
type CheckpointInfo struct {
	Dir            string           `json:"dir"`
	Config         *Config          `json:"config"`
	Parameters     int64            `json:"parameters"`      // weights the config implies (tied LM head once)
	Tensors        int              `json:"tensors"`         // tensors stored
	StoredDTypes   map[string]int64 `json:"stored_dtypes"`   // stored parameters per safetensors dtype
	Files          map[string]int64 `json:"files"`           // weight files and their sizes in bytes
	TokenizerFiles []string         `json:"tokenizer_files"` // tokenizer files present
}

// Inspect reads the config and the safetensors headers of the checkpoint in
// dir and checks every tensor's presence and shape against the config, as
// Load does, without reading the weights.
func Inspect(dir string) (*CheckpointInfo, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	files, where, err := openCheckpointFiles(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	info := &CheckpointInfo{Dir: dir, Config: cfg, Parameters: cfg.NumParameters(), Tensors: len(where),
		StoredDTypes: map[string]int64{}, Files: map[string]int64{}}
	for _, s := range tensorSpecs(cfg) {
		f, ok := where[s.name]
		if !ok {
			return nil, fmt.Errorf("checkpoint %s: tensor %s is missing", dir, s.name)
		}
		if e := f.entries[s.name]; !equalInts(e.Shape, s.shape) {
			return nil, fmt.Errorf("safetensors %s: tensor %s has shape %v, the config wants %v", f.path, s.name, e.Shape, s.shape)
		}
	}
	for _, f := range files {
		st, err := f.f.Stat()
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		info.Files[filepath.Base(f.path)] = st.Size()
		for _, e := range f.entries {
			n := int64(1)
			for _, d := range e.Shape {
				n *= int64(d)
			}
			info.StoredDTypes[e.DType] += n
		}
	}
	for _, name := range tokenizerFiles {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			info.TokenizerFiles = append(info.TokenizerFiles, name)
		}
	}
	return info, nil
}

// WriteFile writes the scores as JSON to path, through a temporary file
// and a rename.
func (o *ScoreOutput) WriteFile(path string) error {
	data, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("score output: %w", err)
	}
	return atomicfile.WriteFile(path, append(data, '\n'))
}
