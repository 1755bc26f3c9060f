package model

// Saving a Model as a Hugging Face checkpoint directory (package
// model/checkpoint writes its files).

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/model/checkpoint"
	"github.com/mageguard/mageguard/model/safetensors"
)

// DefaultMaxShardBytes is the shard size above which Save splits the
// weights into several files (transformers' default max_shard_size, 5 GB).
const DefaultMaxShardBytes = 5_000_000_000

// SaveOptions control Save.
type SaveOptions struct {
	DType         string // storage dtype of the weights: "float32", "bfloat16" or "float16"; "" = the model's dtype
	MaxShardBytes int64  // split into model-0000k-of-0000n.safetensors above this size; 0 = DefaultMaxShardBytes, < 0 = never
	TokenizerDir  string // when set, tokenizer files found there (tokenizer.json, tokenizer_config.json, …) are copied in (checkpoint.ReadTokenizerFiles)
	// Tokenizer, when set, is written in instead of TokenizerDir's files:
	// the files checkpoint.ReadTokenizerFiles read when a run began, so a
	// checkpoint saved hours later does not depend on its base model still
	// being there.
	Tokenizer checkpoint.TokenizerFiles
	// Values, when set, gives the value to write for a weight instead of its variable's, by
	// the variable's scope and name (context.Variable.ScopeAndName): a trainer's float32
	// master weights, which the bfloat16 variables are rounded copies of.
	Values map[string]*tensors.Tensor
}

// Save writes the model as a Hugging Face checkpoint directory: config.json,
// generation_config.json, model.safetensors (or shards and
// model.safetensors.index.json), and the tokenizer files. Every file is
// written to a temporary name and renamed; when dir does not exist yet the
// whole directory is built under a temporary name and renamed at the end, so
// a crash never leaves a half-written checkpoint. Stale weight files of an
// earlier save into dir are removed (checkpoint.Write).
func (m *Model) Save(dir string, opts SaveOptions) error {
	stDType, torchDType, err := storageDType(opts.DType, m.dtype)
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	tok, err := opts.tokenizerFiles()
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	maxShard := opts.MaxShardBytes
	if maxShard == 0 {
		maxShard = DefaultMaxShardBytes
	}
	ts, err := m.weightsToSave(stDType, opts.Values)
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	cfgJSON, err := m.cfg.hfConfigJSON(torchDType)
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	genJSON, err := m.cfg.generationConfigJSON()
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	return checkpoint.Write(dir, checkpoint.Contents{
		Weights:       ts,
		MaxShardBytes: maxShard,
		Files:         map[string][]byte{"config.json": cfgJSON, "generation_config.json": genJSON},
		Tokenizer:     tok,
	})
}

// storageDType maps SaveOptions.DType to the safetensors dtype and the
// config.json torch_dtype; "" is the model's dtype.
func storageDType(name string, model dtypes.DType) (stDType, torchDType string, err error) {
	switch strings.ToLower(name) {
	case "":
		if model == dtypes.BFloat16 {
			return safetensors.BF16, "bfloat16", nil
		}
		return safetensors.F32, "float32", nil
	case "float32", "f32":
		return safetensors.F32, "float32", nil
	case "bfloat16", "bf16":
		return safetensors.BF16, "bfloat16", nil
	case "float16", "f16":
		return safetensors.F16, "float16", nil
	}
	return "", "", fmt.Errorf("dtype must be float32, bfloat16 or float16, got %q", name)
}

// tokenizerFiles returns the tokenizer files to write: opts.Tokenizer, or
// those of opts.TokenizerDir, or none.
func (opts *SaveOptions) tokenizerFiles() (checkpoint.TokenizerFiles, error) {
	tok := opts.Tokenizer
	if tok == nil && opts.TokenizerDir != "" {
		var err error
		if tok, err = checkpoint.ReadTokenizerFiles(opts.TokenizerDir); err != nil {
			return nil, err
		}
	}
	if tok != nil && tok["tokenizer.json"] == nil {
		return nil, fmt.Errorf("tokenizer: the files given have no tokenizer.json")
	}
	return tok, nil
}

// weightsToSave lists every weight, in the order Hugging Face writes them,
// stored as stDType: its variable's value, or values' by the variable's
// scope and name when given.
func (m *Model) weightsToSave(stDType string, values map[string]*tensors.Tensor) ([]safetensors.Tensor, error) {
	var ts []safetensors.Tensor
	for _, s := range tensorSpecs(&m.cfg) {
		t, err := m.weightTensor(s.name)
		if err != nil {
			return nil, err
		}
		if v := m.ctx.GetVariableByScopeAndName(varPath(s.name)); v != nil && values[v.ScopeAndName()] != nil {
			t = values[v.ScopeAndName()]
			if !slices.Equal(t.Shape().Dimensions, s.shape) {
				return nil, fmt.Errorf("the value given for %s has shape %v, want %v", s.name, t.Shape().Dimensions, s.shape)
			}
		}
		ts = append(ts, safetensors.Tensor{Name: s.name, DType: stDType, Shape: s.shape, Src: t})
	}
	return ts, nil
}
