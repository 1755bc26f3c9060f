package model

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/gomlx/gomlx/backends"

	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/model/tokenizer"
)

// Settings is the `model` section of mageguard's configuration: which
// checkpoint to run, on which backend, and — for `model init`, which has no
// checkpoint yet — the architecture keys of a new random model (a loaded
// checkpoint's config.json always wins over them).
type Settings struct {
	Path      string `yaml:"path"`      // checkpoint directory (Hugging Face layout) to load; "" = none
	Tokenizer string `yaml:"tokenizer"` // directory with tokenizer.json and tokenizer_config.json, copied into checkpoints written
	DType     string `yaml:"dtype"`     // float32 | bfloat16: weights in memory and in checkpoints written by model init
	Seed      int64  `yaml:"seed"`      // seed of the random init of model init
	// LMHeadChunk is the vocabulary rows per chunk of the LM head (lmhead.go):
	// log-probs, entropies, their gradient and generation's logits are
	// computed a chunk at a time, so no [tokens × vocabulary] tensor is held;
	// 0 = the whole vocabulary at once.
	LMHeadChunk int `yaml:"lm_head_chunk"`
	// AttentionBlock is the query rows per block of the attention in training graphs
	// (attention.go): the backward recomputes each block's probabilities instead of keeping
	// [B, heads, T, S] tensors; 0 = the plain softmax attention.
	AttentionBlock int `yaml:"attention_block"`
	// LoRA, with a rank, makes train and sft train a LoRA adapter on the
	// frozen checkpoint (lora.go) and write adapter checkpoints.
	LoRA LoRAConfig `yaml:"lora"`
	// BackendConfig holds the backend keys (model.backend, model.plugin, ...).
	BackendConfig backend.Config `yaml:",inline"`
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
		Tokenizer:      "assets/qwen3",
		DType:          "float32",
		LMHeadChunk:    DefaultLMHeadChunk,
		AttentionBlock: DefaultAttentionBlock,
		LoRA:           DefaultLoRAConfig(),
		BackendConfig:  backend.Default(),
		Config:         DefaultTinyConfig(),
	}
}

// Validate checks the section; errors start with the key.
func (s *Settings) Validate() error {
	if _, err := ParseDType(s.DType); err != nil {
		return err
	}
	if s.LMHeadChunk < 0 {
		return fmt.Errorf("lm_head_chunk must be >= 0 (0 = the whole vocabulary), got %d", s.LMHeadChunk)
	}
	if s.AttentionBlock < 0 {
		return fmt.Errorf("attention_block must be >= 0 (0 = the plain attention), got %d", s.AttentionBlock)
	}
	if err := s.LoRA.Validate(); err != nil {
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
// tokenizer.json.gz), else — for an adapter checkpoint — its base's when
// that does, else model.tokenizer.
func (s *Settings) TokenizerDir() string {
	if s.Path == "" {
		return s.Tokenizer
	}
	dirs := []string{s.Path}
	if base, _, err := AdapterOf(s.Path); err == nil && base != s.Path {
		dirs = append(dirs, base)
	}
	for _, dir := range dirs {
		for _, f := range []string{"tokenizer.json", "tokenizer.json.gz"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
				return dir
			}
		}
	}
	return s.Tokenizer
}

// LoadTokenizer loads the tokenizer of these settings (TokenizerDir) and
// returns it with the directory it was read from. With a checkpoint
// (model.path with a config.json, or an adapter checkpoint whose base has
// one), every id of the tokenizer must be within its vocab_size, checked
// before the tokenizer is built.
func (s *Settings) LoadTokenizer() (*tokenizer.Tokenizer, string, error) {
	dir := s.TokenizerDir()
	var bound tokenizer.IDBound
	if s.Path != "" {
		ckpt := s.Path
		if base, _, err := AdapterOf(s.Path); err == nil {
			ckpt = base
		}
		if c, err := LoadConfig(ckpt); err == nil { // a bad config.json is LoadModel's to report
			bound = tokenizer.IDBound{VocabSize: c.VocabSize, DeclaredBy: "vocab_size of " + filepath.Join(ckpt, "config.json")}
		}
	}
	tok, err := tokenizer.LoadWithin(dir, bound)
	if err != nil {
		return nil, "", fmt.Errorf("model.tokenizer: %w", err)
	}
	return tok, dir, nil
}

// LoadModel builds the model these settings name, on backend, with its
// weights in model.dtype: the checkpoint model.path (a whole model, or a
// LoRA adapter directory, loaded onto its base), or — when model.path is
// "" — a random model from the architecture keys and model.seed (a
// checkpoint's config.json always wins over the keys). With tok (nil skips
// the check), every id of the tokenizer must have an embedding.
func (s *Settings) LoadModel(backend backends.Backend, tok *tokenizer.Tokenizer) (*Model, error) {
	dtype, err := ParseDType(s.DType)
	if err != nil {
		return nil, fmt.Errorf("model.%w", err)
	}
	var m *Model
	what := "the random model (model.vocab_size)"
	if s.Path == "" {
		cfg := s.Config
		if m, err = New(backend, &cfg, s.Seed, dtype); err != nil {
			return nil, err
		}
	} else {
		if _, err := os.Stat(s.Path); err != nil {
			return nil, fmt.Errorf("model.path: %w", err)
		}
		opts := LoadOptions{DType: dtype, AllowNonFinite: s.AllowNonFinite, Log: os.Stderr}
		if m, err = LoadWith(backend, s.Path, opts); err != nil {
			return nil, fmt.Errorf("load checkpoint: %w", err)
		}
		what = "the checkpoint " + s.Path + " (vocab_size)"
	}
	m.SetLMHeadChunk(s.LMHeadChunk)
	m.SetAttentionBlock(s.AttentionBlock)
	if tok != nil && tok.VocabSize() > m.cfg.VocabSize {
		return nil, fmt.Errorf("the tokenizer %s has %d ids but %s has only %d embeddings", s.TokenizerDir(), tok.VocabSize(), what, m.cfg.VocabSize)
	}
	return m, nil
}

// Open is what a command needs to run these settings: the backend
// (backend.New), the tokenizer (LoadTokenizer) and the model (LoadModel,
// checked against the tokenizer). Like backend.New it applies no process
// settings (backend.ProcessSettings): the program does, once.
func (s *Settings) Open() (*Model, *tokenizer.Tokenizer, error) {
	tok, _, err := s.LoadTokenizer()
	if err != nil {
		return nil, nil, err
	}
	b, err := backend.New(s.BackendConfig)
	if err != nil {
		return nil, nil, err
	}
	m, err := s.LoadModel(b, tok)
	if err != nil {
		return nil, nil, err
	}
	return m, tok, nil
}

// PrepareAdapter readies m, loaded by LoadModel, for training under these
// settings: with model.lora.rank > 0, a new LoRA adapter on the checkpoint
// model.path (seeded by model.seed), or — when m already has an adapter (an
// adapter checkpoint) — a check that model.lora describes it. With rank 0
// an adapter checkpoint keeps training its adapter and a whole model all
// its weights. A LoRA adapter needs a checkpoint on disk for its base.
func (s *Settings) PrepareAdapter(m *Model) error {
	have := m.Adapter()
	switch {
	case s.LoRA.Rank == 0:
		return nil
	case have != nil && !have.sameAdapter(&s.LoRA):
		return fmt.Errorf("model.lora (%s) differs from the adapter of %s (%s): set model.lora.rank=0 to continue that adapter",
			s.LoRA.String(), s.Path, have.String())
	case have != nil:
		return nil
	case s.Path == "":
		return errors.New("model.lora: a LoRA adapter needs a base checkpoint (model.path or --model), not a random model")
	}
	return m.AddAdapter(s.LoRA, s.Seed, s.Path)
}
