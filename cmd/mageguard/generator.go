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
	"github.com/mageguard/mageguard/serve"
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

// onlineGuard is the guard of serve and mcp: its tokenizer and prompts,
// built at once, and its generator, loaded later by load (the model's
// slow load, while the server already answers /healthz 503).
type onlineGuard struct {
	cfg     *config.Config
	name    string // the command, which starts errors and log lines
	tok     *tokenizer.Tokenizer
	tokPath string
	guard   *rollout.Guard
	gen     *deferredGenerator
}

// deferredGenerator forwards to the generator set once the model is loaded
// (the guard is built, and the port bound, before the slow load).
type deferredGenerator struct{ generate.Generator }

// newOnlineGuard reads cfg's tokenizer and builds the guard, its generator
// to come.
func newOnlineGuard(cfg *config.Config, name string) (*onlineGuard, error) {
	tok, tokPath, err := cfg.Model.LoadTokenizer()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	o := &onlineGuard{cfg: cfg, name: name, tok: tok, tokPath: tokPath, gen: &deferredGenerator{}}
	if o.guard, err = rollout.NewGuard(cfg.Rollout, tok, o.gen); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return o, nil
}

// load loads the guard's generator (guardGenerator), checks that
// serve.max_prompt_tokens leaves a local model room for the guard's new
// tokens, and hands the guard to srv, which is then ready.
func (o *onlineGuard) load(srv *serve.Server, log io.Writer) error {
	g, err := guardGenerator(o.cfg, o.tok, o.tokPath, o.guard.Stops(), log, o.name)
	if err != nil {
		return err
	}
	if err := checkPromptRoom(o.cfg, g, o.name); err != nil {
		return err
	}
	o.gen.Generator = g
	srv.SetGuard(o.guard)
	return nil
}

// checkPromptRoom refuses, for a guard on a local model, a
// serve.max_prompt_tokens that with the guard's new tokens passes the
// model's max_position_embeddings: a step within the bound would still be
// too long for the model (it would fail in its batch instead of being
// refused alone before it).
func checkPromptRoom(cfg *config.Config, g generate.Generator, name string) error {
	mg, ok := g.(*localgen.Generator)
	if !ok {
		return nil
	}
	newTokens := max(cfg.Rollout.MaxMemoryTokens, cfg.Rollout.MaxJudgeTokens)
	if limit := mg.Model.Config().MaxPositionEmbeddings; cfg.Serve.MaxPromptTokens+newTokens > limit {
		return fmt.Errorf("%s: serve.max_prompt_tokens %d + %d new tokens exceed the model's max_position_embeddings %d: lower serve.max_prompt_tokens",
			name, cfg.Serve.MaxPromptTokens, newTokens, limit)
	}
	return nil
}
