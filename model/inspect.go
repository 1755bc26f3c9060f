package model

import (
	"fmt"
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
	// Adapter describes the LoRA adapter when dir is an adapter directory (the rest describes
	// its base).
	Adapter *AdapterInfo `json:"adapter,omitempty"`
}

// AdapterInfo describes a LoRA adapter directory.
type AdapterInfo struct {
	Dir        string     `json:"dir"`
	Base       string     `json:"base"` // the base checkpoint directory it names
	LoRA       LoRAConfig `json:"lora"`
	Scale      float64    `json:"scale"`      // s = alpha/rank, or alpha/√rank with rslora
	Parameters int64      `json:"parameters"` // r·(in + out) for every adapted projection of every layer
}

// Inspect reads the config and the safetensors headers of the checkpoint in
// dir and checks every tensor's presence and shape against the config, as
// Load does, without reading the weights.
//
// For a LoRA adapter directory it describes the base and the adapter.
func Inspect(dir string) (*CheckpointInfo, error) {
	if base, lora, err := AdapterOf(dir); err != nil {
		return nil, err
	} else if lora != nil {
		info, err := Inspect(base)
		if err != nil {
			return nil, fmt.Errorf("adapter %s: base %s: %w", dir, base, err)
		}
		info.Adapter = &AdapterInfo{Dir: dir, Base: base, LoRA: *lora, Scale: lora.Scale(),
			Parameters: NumAdapterParameters(info.Config, lora.Rank, lora.Targets)}
		return info, nil
	}
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
