package model

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Settings is the `model` section of mageguard's configuration: which
// checkpoint to run, on which backend, and — for `model init`, which has no
// checkpoint yet — the architecture keys of a new random model (a loaded
// checkpoint's config.json always wins over them).
type Settings struct {
	Path          string `yaml:"path"`      // checkpoint directory (Hugging Face layout) to load; "" = none
	Tokenizer     string `yaml:"tokenizer"` // directory with tokenizer.json and tokenizer_config.json, copied into checkpoints written
	DType         string `yaml:"dtype"`     // float32 | bfloat16: weights in memory and in checkpoints written by model init
	Seed          int64  `yaml:"seed"`      // seed of the random init of model init
	BackendConfig `yaml:",inline"`
	Config        `yaml:",inline"`

	// AllowNonFinite loads a checkpoint whose weights hold NaN or ±Inf, with
	// a warning, instead of refusing it (its outputs are NaN: for inspecting
	// a broken checkpoint, never for a guard).
	AllowNonFinite bool `yaml:"allow_non_finite"`
}

// DefaultSettings is the tiny CPU model (DefaultTinyConfig) on the pure-Go
// backend, float32, with the bundled Qwen3 tokenizer.
func DefaultSettings() Settings {
	return Settings{
		Tokenizer:     "assets/qwen3",
		DType:         "float32",
		BackendConfig: DefaultBackendConfig(),
		Config:        DefaultTinyConfig(),
	}
}

// Validate checks the section; errors start with the key.
func (s *Settings) Validate() error {
	if _, err := ParseDType(s.DType); err != nil {
		return err
	}
	if err := s.BackendConfig.Validate(); err != nil {
		return err
	}
	if err := s.Config.Validate(); err != nil {
		return err
	}
	return nil
}

// LoadOptions are the options LoadWith takes from these settings
// (model.dtype, model.allow_non_finite); warnings go to log.
func (s *Settings) LoadOptions(log io.Writer) (LoadOptions, error) {
	dtype, err := ParseDType(s.DType)
	if err != nil {
		return LoadOptions{}, fmt.Errorf("model.%w", err)
	}
	return LoadOptions{DType: dtype, AllowNonFinite: s.AllowNonFinite, Log: log}, nil
}

// String summarizes the settings on one line.
func (s *Settings) String() string {
	return fmt.Sprintf("path %q, backend %s, dtype %s, %s", s.Path, s.BackendConfig.Name, s.DType, s.Config.String())
}

// TokenizerDir returns where the tokenizer of these settings is: the
// checkpoint directory (model.path) when it holds tokenizer.json (or
// tokenizer.json.gz), else model.tokenizer.
func (s *Settings) TokenizerDir() string {
	if s.Path != "" {
		for _, f := range []string{"tokenizer.json", "tokenizer.json.gz"} {
			if _, err := os.Stat(filepath.Join(s.Path, f)); err == nil {
				return s.Path
			}
		}
	}
	return s.Tokenizer
}
