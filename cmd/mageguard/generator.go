package main

import (
	"fmt"
	"io"
	"os"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/localgen"
	"github.com/mageguard/mageguard/rollout/openai"
)

// guardGenerator returns what runs the guard's calls under cfg: the
// checkpoint model.path on the model section's backend
// (rollout.generator: local), or an OpenAI-compatible server
// (rollout.generator: openai, its API key read from the environment
// variable rollout.api_key_env). stops are the guard's stop tokens.
func guardGenerator(cfg *config.Config, tok *tokenizer.Tokenizer, tokPath string, stops []int, log io.Writer, name string) (generate.Generator, error) {
	r := cfg.Rollout
	if r.Generator == rollout.GeneratorOpenAI {
		key := ""
		if r.APIKeyEnv != "" {
			key = os.Getenv(r.APIKeyEnv)
		}
		gen, err := openai.New(r.RemoteConfig, tok, stops, key)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		auth := "no API key"
		if key != "" {
			auth = "API key from $" + r.APIKeyEnv
		}
		fmt.Fprintf(log, "%s: guard calls go to %s (%s API, model %q, %s); tokenizer %s\n", name, r.Endpoint, r.RemoteAPI, r.RemoteModel, auth, tokPath)
		return gen, nil
	}
	if cfg.Model.Path == "" {
		return nil, fmt.Errorf("%s: no checkpoint: give --model DIR (or --set model.path=DIR), or a remote generator (rollout.generator: openai)", name)
	}
	m, err := loadCheckpoint(cfg.Model, tok, tokPath, log)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &localgen.Generator{Model: m}, nil
}
