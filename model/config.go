package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/mageguard/mageguard/internal/strictjson"
)

// Config is the architecture of a Qwen3 model: the fields of a Hugging Face
// config.json (model_type "qwen3") that the forward pass depends on, with the
// json names of config.json and the same names as yaml keys of the `model`
// configuration section.
type Config struct {
	VocabSize             int     `json:"vocab_size" yaml:"vocab_size"`                           // number of token ids
	HiddenSize            int     `json:"hidden_size" yaml:"hidden_size"`                         // width of the residual stream
	IntermediateSize      int     `json:"intermediate_size" yaml:"intermediate_size"`             // width of the SwiGLU MLP
	NumHiddenLayers       int     `json:"num_hidden_layers" yaml:"num_hidden_layers"`             // decoder layers
	NumAttentionHeads     int     `json:"num_attention_heads" yaml:"num_attention_heads"`         // query heads
	NumKeyValueHeads      int     `json:"num_key_value_heads" yaml:"num_key_value_heads"`         // key/value heads (GQA groups)
	HeadDim               int     `json:"head_dim" yaml:"head_dim"`                               // width of one head (not hidden/heads in Qwen3)
	RMSNormEps            float64 `json:"rms_norm_eps" yaml:"rms_norm_eps"`                       // epsilon inside every RMSNorm
	RopeTheta             float64 `json:"rope_theta" yaml:"rope_theta"`                           // RoPE base frequency
	TieWordEmbeddings     bool    `json:"tie_word_embeddings" yaml:"tie_word_embeddings"`         // LM head reuses the embedding matrix
	AttentionBias         bool    `json:"attention_bias" yaml:"attention_bias"`                   // q/k/v/o projections carry a bias
	MaxPositionEmbeddings int     `json:"max_position_embeddings" yaml:"max_position_embeddings"` // longest sequence the model is meant for
	InitializerRange      float64 `json:"initializer_range" yaml:"initializer_range"`             // std of random init of linear and embedding weights
	BOSTokenID            int     `json:"bos_token_id" yaml:"bos_token_id"`                       // beginning-of-sequence id (config.json / generation_config.json)
	EOSTokenIDs           []int   `json:"eos_token_id" yaml:"eos_token_id"`                       // end-of-sequence ids: generation stops on any of them
}

// DefaultTinyConfig is a CPU-sized Qwen3 that uses the real Qwen3 tokenizer's
// vocabulary (151,936 ids): hidden 64, 2 layers, 4 query / 2 key-value heads
// of width 16, MLP 192, tied embeddings (9.8M parameters, most of them the
// embedding).
func DefaultTinyConfig() Config {
	return Config{
		VocabSize:             151936,
		HiddenSize:            64,
		IntermediateSize:      192,
		NumHiddenLayers:       2,
		NumAttentionHeads:     4,
		NumKeyValueHeads:      2,
		HeadDim:               16,
		RMSNormEps:            1e-6,
		RopeTheta:             1e6,
		TieWordEmbeddings:     true,
		MaxPositionEmbeddings: 40960,
		InitializerRange:      0.02,
		BOSTokenID:            151643,        // <|endoftext|>
		EOSTokenIDs:           []int{151645}, // <|im_end|>
	}
}

// Architecture bounds: every key of a config.json (and of the `model`
// section) must lie in its range, far beyond any real model (Qwen3-235B has
// hidden 4096 and 94 layers; the largest vocabularies are ~262K) but small
// enough that no product of them overflows and that nothing is allocated
// from a wrong value before the checkpoint's real size is checked.
var configBounds = []struct {
	key string
	max int
	get func(c *Config) int
}{
	{"vocab_size", 1 << 22, func(c *Config) int { return c.VocabSize }},
	{"hidden_size", 1 << 16, func(c *Config) int { return c.HiddenSize }},
	{"intermediate_size", 1 << 18, func(c *Config) int { return c.IntermediateSize }},
	{"num_hidden_layers", 1024, func(c *Config) int { return c.NumHiddenLayers }},
	{"num_attention_heads", 1024, func(c *Config) int { return c.NumAttentionHeads }},
	{"num_key_value_heads", 1024, func(c *Config) int { return c.NumKeyValueHeads }},
	{"head_dim", 1024, func(c *Config) int { return c.HeadDim }},
	{"max_position_embeddings", 1 << 24, func(c *Config) int { return c.MaxPositionEmbeddings }},
}

// maxEOSTokens bounds eos_token_id's list.
const maxEOSTokens = 64

// Validate checks that the architecture is one this package can run, every
// key within its range (configBounds). Errors start with the offending key.
func (c *Config) Validate() error {
	for _, b := range configBounds {
		if v := b.get(c); v <= 0 || v > b.max {
			return fmt.Errorf("%s must be in [1, %d], got %d", b.key, b.max, v)
		}
	}
	if c.NumKeyValueHeads > c.NumAttentionHeads {
		return fmt.Errorf("num_key_value_heads must be at most num_attention_heads (%d), got %d", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("num_attention_heads must be a multiple of num_key_value_heads, got %d and %d",
			c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim must be even for rotary embeddings, got %d", c.HeadDim)
	}
	if !(c.RMSNormEps > 0 && c.RMSNormEps <= 1) {
		return fmt.Errorf("rms_norm_eps must be in (0, 1], got %g", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0 && c.RopeTheta <= 1e12) {
		return fmt.Errorf("rope_theta must be in (0, 1e12], got %g", c.RopeTheta)
	}
	if !(c.InitializerRange >= 0 && c.InitializerRange <= 10) {
		return fmt.Errorf("initializer_range must be in [0, 10], got %g", c.InitializerRange)
	}
	if len(c.EOSTokenIDs) > maxEOSTokens {
		return fmt.Errorf("eos_token_id must list at most %d ids, got %d", maxEOSTokens, len(c.EOSTokenIDs))
	}
	for _, id := range append([]int{c.BOSTokenID}, c.EOSTokenIDs...) {
		if id < 0 || id >= c.VocabSize {
			return fmt.Errorf("bos_token_id/eos_token_id must be in [0, vocab_size=%d), got %d", c.VocabSize, id)
		}
	}
	return nil
}

// NumParameters is the number of weights of a model with this architecture
// (the tied LM head counted once).
func (c *Config) NumParameters() int64 {
	var n int64
	for _, s := range tensorSpecs(c) {
		p := int64(1)
		for _, d := range s.shape {
			p *= int64(d)
		}
		n += p
	}
	return n
}

// maxConfigBytes bounds config.json (Qwen3's is under 1 KB).
const maxConfigBytes = 1 << 20

// LoadConfig reads dir/config.json: at most maxConfigBytes, no key given
// twice, every architecture key in range.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := strictjson.ReadFile(path, maxConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("model config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("model config %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig decodes a Hugging Face Qwen3 config.json. Keys that are absent
// take the defaults of transformers' Qwen3Config (head_dim 128, rope_theta
// 10000, tie_word_embeddings false, …). Features this package does not
// implement — rope scaling, sliding-window attention, partial rotary
// embeddings, activations other than SiLU, attention dropout — are refused
// with an error that names the key.
func ParseConfig(data []byte) (*Config, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw map[string]any
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("bad JSON: %w", err)
	}
	r := jsonReader{raw: raw}
	if mt := r.str("model_type", "qwen3"); mt != "qwen3" {
		return nil, fmt.Errorf("model_type: want \"qwen3\", got %q", mt)
	}
	cfg := &Config{
		VocabSize:             r.int("vocab_size", 151936),
		HiddenSize:            r.int("hidden_size", 4096),
		IntermediateSize:      r.int("intermediate_size", 22016),
		NumHiddenLayers:       r.int("num_hidden_layers", 32),
		NumAttentionHeads:     r.int("num_attention_heads", 32),
		RMSNormEps:            r.float("rms_norm_eps", 1e-6),
		TieWordEmbeddings:     r.bool("tie_word_embeddings", false),
		AttentionBias:         r.bool("attention_bias", false),
		MaxPositionEmbeddings: r.int("max_position_embeddings", 32768),
		InitializerRange:      r.float("initializer_range", 0.02),
		BOSTokenID:            r.int("bos_token_id", 151643),
		EOSTokenIDs:           r.ints("eos_token_id", []int{151645}),
	}
	// num_key_value_heads: default 32; an explicit null means "same as the query heads".
	if v, ok := raw["num_key_value_heads"]; ok && v == nil {
		cfg.NumKeyValueHeads = cfg.NumAttentionHeads
	} else {
		cfg.NumKeyValueHeads = r.int("num_key_value_heads", 32)
	}
	// head_dim: Qwen3Config declares 128; null falls back to hidden/heads as in the modeling code.
	if v, ok := raw["head_dim"]; ok && v == nil {
		cfg.HeadDim = cfg.HiddenSize / cfg.NumAttentionHeads
	} else {
		cfg.HeadDim = r.int("head_dim", 128)
	}
	if act := r.str("hidden_act", "silu"); act != "silu" && act != "swish" {
		return nil, fmt.Errorf("hidden_act: only \"silu\" is implemented, got %q", act)
	}
	// RoPE: top-level rope_theta (transformers 4.x) or rope_parameters (5.x);
	// any rope_scaling / rope_type other than "default" is refused.
	cfg.RopeTheta = r.float("rope_theta", 10000)
	if rs, ok := raw["rope_scaling"]; ok && rs != nil {
		m, isMap := rs.(map[string]any)
		if !isMap {
			return nil, fmt.Errorf("rope_scaling: want null or an object, got %v", rs)
		}
		if t := ropeType(m); t != "default" {
			return nil, fmt.Errorf("rope_scaling: rope type %q is not implemented (only default RoPE)", t)
		}
	}
	if rp, ok := raw["rope_parameters"]; ok && rp != nil {
		m, isMap := rp.(map[string]any)
		if !isMap {
			return nil, fmt.Errorf("rope_parameters: want an object, got %v", rp)
		}
		if t := ropeType(m); t != "default" {
			return nil, fmt.Errorf("rope_parameters.rope_type: %q is not implemented (only default RoPE)", t)
		}
		pr := jsonReader{raw: m, prefix: "rope_parameters."}
		cfg.RopeTheta = pr.float("rope_theta", cfg.RopeTheta)
		if f := pr.float("partial_rotary_factor", 1); f != 1 {
			return nil, fmt.Errorf("rope_parameters.partial_rotary_factor: only 1 is implemented, got %g", f)
		}
		if r.err == nil {
			r.err = pr.err
		}
	}
	if f := r.float("partial_rotary_factor", 1); f != 1 {
		return nil, fmt.Errorf("partial_rotary_factor: only 1 is implemented, got %g", f)
	}
	if r.bool("use_sliding_window", false) {
		return nil, fmt.Errorf("use_sliding_window: sliding-window attention is not implemented")
	}
	if lt, ok := raw["layer_types"].([]any); ok {
		for i, t := range lt {
			if t != "full_attention" {
				return nil, fmt.Errorf("layer_types[%d]: only \"full_attention\" is implemented, got %v", i, t)
			}
		}
	}
	if d := r.float("attention_dropout", 0); d != 0 {
		return nil, fmt.Errorf("attention_dropout: dropout is not implemented, got %g", d)
	}
	if r.err != nil {
		return nil, r.err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func ropeType(m map[string]any) string {
	for _, k := range []string{"rope_type", "type"} {
		if s, ok := m[k].(string); ok {
			return s
		}
	}
	return "default"
}

// jsonReader reads typed values with defaults from a decoded JSON object; the
// first type error is kept in err (naming the key).
type jsonReader struct {
	raw    map[string]any
	prefix string
	err    error
}

func (r *jsonReader) fail(key string, v any, want string) {
	if r.err == nil {
		r.err = fmt.Errorf("%s%s: want %s, got %v", r.prefix, key, want, v)
	}
}

func (r *jsonReader) int(key string, def int) int {
	v, ok := r.raw[key]
	if !ok || v == nil {
		return def
	}
	n, isNum := v.(json.Number)
	if !isNum {
		r.fail(key, v, "an integer")
		return def
	}
	i, err := n.Int64()
	if err != nil {
		r.fail(key, v, "an integer")
		return def
	}
	return int(i)
}

func (r *jsonReader) ints(key string, def []int) []int {
	v, ok := r.raw[key]
	if !ok || v == nil {
		return def
	}
	if list, isList := v.([]any); isList {
		out := make([]int, 0, len(list))
		for _, e := range list {
			sub := jsonReader{raw: map[string]any{key: e}, prefix: r.prefix}
			out = append(out, sub.int(key, 0))
			if sub.err != nil {
				r.fail(key, v, "an integer or a list of integers")
				return def
			}
		}
		return out
	}
	return []int{r.int(key, 0)}
}

func (r *jsonReader) float(key string, def float64) float64 {
	v, ok := r.raw[key]
	if !ok || v == nil {
		return def
	}
	n, isNum := v.(json.Number)
	if !isNum {
		r.fail(key, v, "a number")
		return def
	}
	f, err := n.Float64()
	if err != nil {
		r.fail(key, v, "a number")
		return def
	}
	return f
}

func (r *jsonReader) bool(key string, def bool) bool {
	v, ok := r.raw[key]
	if !ok || v == nil {
		return def
	}
	b, isBool := v.(bool)
	if !isBool {
		r.fail(key, v, "true or false")
		return def
	}
	return b
}

func (r *jsonReader) str(key, def string) string {
	v, ok := r.raw[key]
	if !ok || v == nil {
		return def
	}
	s, isStr := v.(string)
	if !isStr {
		r.fail(key, v, "a string")
		return def
	}
	return s
}

// hfConfigJSON renders the config.json a Hugging Face stack reads
// (Qwen3ForCausalLM). torchDType is "float32" or "bfloat16".
func (c *Config) hfConfigJSON(torchDType string) ([]byte, error) {
	var eos any = c.EOSTokenIDs
	if len(c.EOSTokenIDs) == 1 {
		eos = c.EOSTokenIDs[0]
	}
	doc := map[string]any{
		"architectures":           []string{"Qwen3ForCausalLM"},
		"model_type":              "qwen3",
		"vocab_size":              c.VocabSize,
		"hidden_size":             c.HiddenSize,
		"intermediate_size":       c.IntermediateSize,
		"num_hidden_layers":       c.NumHiddenLayers,
		"num_attention_heads":     c.NumAttentionHeads,
		"num_key_value_heads":     c.NumKeyValueHeads,
		"head_dim":                c.HeadDim,
		"hidden_act":              "silu",
		"max_position_embeddings": c.MaxPositionEmbeddings,
		"initializer_range":       c.InitializerRange,
		"rms_norm_eps":            c.RMSNormEps,
		"rope_theta":              c.RopeTheta,
		"rope_scaling":            nil,
		"attention_bias":          c.AttentionBias,
		"attention_dropout":       0.0,
		"use_sliding_window":      false,
		"sliding_window":          nil,
		"max_window_layers":       c.NumHiddenLayers,
		"tie_word_embeddings":     c.TieWordEmbeddings,
		"use_cache":               true,
		"bos_token_id":            c.BOSTokenID,
		"eos_token_id":            eos,
		"torch_dtype":             torchDType,
	}
	return json.MarshalIndent(doc, "", "  ")
}

// generationConfigJSON renders generation_config.json (the stop ids serving
// stacks use by default).
func (c *Config) generationConfigJSON() ([]byte, error) {
	var eos any = c.EOSTokenIDs
	if len(c.EOSTokenIDs) == 1 {
		eos = c.EOSTokenIDs[0]
	}
	return json.MarshalIndent(map[string]any{
		"bos_token_id": c.BOSTokenID,
		"eos_token_id": eos,
	}, "", "  ")
}

// String summarizes the architecture on one line.
func (c *Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "vocab %d, hidden %d, MLP %d, %d layers, %d query / %d kv heads of %d, rope_theta %g, eps %g",
		c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers, c.NumAttentionHeads,
		c.NumKeyValueHeads, c.HeadDim, c.RopeTheta, c.RMSNormEps)
	if c.TieWordEmbeddings {
		b.WriteString(", tied embeddings")
	}
	if c.AttentionBias {
		b.WriteString(", attention bias")
	}
	return b.String()
}
