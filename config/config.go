package config

import (
	"reflect"

	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/mcpgate"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/rewards"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/serve"
	"github.com/mageguard/mageguard/sweep"
	"github.com/mageguard/mageguard/train"
)

// Config is mageguard's whole configuration: one section per package that
// owns it. `configs/*.yaml` files and `--set section.key=value` overrides
// address these sections by their yaml keys.
type Config struct {
	Model   model.Settings  `yaml:"model"`   // the checkpoint or random architecture, backend, tokenizer
	Rollout rollout.Config  `yaml:"rollout"` // prompts, sampling, G, token budgets, structured decoding
	Rewards rewards.Config  `yaml:"rewards"` // judge/memory rewards and penalties (docs/design.md#rewards)
	GRPO    grpo.Config     `yaml:"grpo"`    // turn-wise GRPO objective and AdamW (docs/design.md#turn-wise-grpo)
	Train   train.Config    `yaml:"train"`   // the training loop: data, steps, checkpoints, logs
	SFT     train.SFTConfig `yaml:"sft"`     // the supervised warm start's teacher (`mageguard sft`)
	Sweep   sweep.Config    `yaml:"sweep"`   // grid of config points for `mageguard sweep`
	Eval    eval.Config     `yaml:"eval"`    // held-out data and decoding of `mageguard eval`
	Serve   serve.Config    `yaml:"serve"`   // batching, limits and blocking rule of `mageguard serve`
	MCP     mcpgate.Config  `yaml:"mcp"`     // what a downstream or a client may make `mageguard mcp` hold
}

// Default returns the configuration with every section at its defaults.
func Default() *Config {
	return &Config{
		Model:   model.DefaultSettings(),
		Rollout: rollout.DefaultConfig(),
		Rewards: rewards.DefaultConfig(),
		GRPO:    grpo.DefaultConfig(),
		Train:   train.DefaultConfig(),
		SFT:     train.DefaultSFTConfig(),
		Sweep:   sweep.DefaultConfig(),
		Eval:    eval.DefaultConfig(),
		Serve:   serve.DefaultConfig(),
		MCP:     mcpgate.DefaultConfig(),
	}
}

// Load builds a configuration: defaults, then the YAML file (when path is not
// empty), then each `key=value` of sets in order. The paths of PathKeys are
// made absolute (a file's against its folder, the others against the
// working directory). The result is validated.
func Load(path string, sets []string) (*Config, error) {
	var files []string
	if path != "" {
		files = []string{path}
	}
	return LoadFiles(files, sets)
}

// LoadFiles is Load with several files, each overriding the keys it sets in
// those before it (e.g. a checkpoint's settings, then --config).
func LoadFiles(files []string, sets []string) (*Config, error) {
	cfg := Default()
	for _, path := range files {
		if err := LoadFile(path, cfg); err != nil {
			return nil, err
		}
	}
	return finish(cfg, sets)
}

// finish applies sets to cfg, makes its paths absolute and validates it.
func finish(cfg *Config, sets []string) (*Config, error) {
	for _, kv := range sets {
		if err := Set(cfg, kv); err != nil {
			return nil, err
		}
	}
	if err := absPaths(reflect.ValueOf(cfg).Elem()); err != nil {
		return nil, err
	}
	if err := Validate(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// LoadRun is Load for a run's own config.yaml (train --resume): mageguard
// writes it with absolute paths, and a relative path in it comes from an
// older mageguard, which wrote the paths as given, relative to the
// working directory the run started in; they stay so.
func LoadRun(path string, sets []string) (*Config, error) {
	cfg := Default()
	if err := loadFile(path, cfg, 0, false); err != nil {
		return nil, err
	}
	return finish(cfg, sets)
}
