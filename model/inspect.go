package model

import (
	"os"
	"path/filepath"

	"github.com/mageguard/mageguard/model/checkpoint"
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
	w, err := checkpoint.OpenWeights(dir)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	if err := checkTensors(dir, w, tensorSpecs(cfg)); err != nil {
		return nil, err
	}
	info := &CheckpointInfo{Dir: dir, Config: cfg, Parameters: cfg.NumParameters(), Tensors: len(w.Names()),
		StoredDTypes: map[string]int64{}, Files: map[string]int64{}}
	for _, f := range w.Files() {
		info.Files[filepath.Base(f.Path())] = f.Size()
		for _, name := range f.Names() {
			e, _ := f.Entry(name)
			info.StoredDTypes[e.DType] += e.Elements()
		}
	}
	for _, name := range checkpoint.TokenizerFileNames {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			info.TokenizerFiles = append(info.TokenizerFiles, name)
		}
	}
	return info, nil
}
