package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/model/backend"
)

// TestParseConfigDefaults checks the transformers Qwen3Config defaults for
// absent keys, against the values in its source (head_dim 128, not
// hidden/heads; rope_theta 10000; untied).
func TestParseConfigDefaults(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"model_type": "qwen3"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		VocabSize: 151936, HiddenSize: 4096, IntermediateSize: 22016, NumHiddenLayers: 32,
		NumAttentionHeads: 32, NumKeyValueHeads: 32, HeadDim: 128, RMSNormEps: 1e-6, RopeTheta: 10000,
		TieWordEmbeddings: false, AttentionBias: false, MaxPositionEmbeddings: 32768, InitializerRange: 0.02,
		BOSTokenID: 151643, EOSTokenIDs: []int{151645},
	}
	if cfg.String() != want.String() || !slices.Equal(cfg.EOSTokenIDs, want.EOSTokenIDs) ||
		cfg.MaxPositionEmbeddings != want.MaxPositionEmbeddings || cfg.InitializerRange != want.InitializerRange {
		t.Errorf("got %+v\nwant %+v", *cfg, want)
	}
}

// TestParseConfigQwen3_4B reads the config.json published with Qwen3-4B.
func TestParseConfigQwen3_4B(t *testing.T) {
	const qwen3_4b = `{
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 2560, "initializer_range": 0.02, "intermediate_size": 9728,
  "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
  "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936}`
	cfg, err := ParseConfig([]byte(qwen3_4b))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HiddenSize != 2560 || cfg.NumKeyValueHeads != 8 || cfg.HeadDim != 128 || cfg.RopeTheta != 1e6 ||
		!cfg.TieWordEmbeddings || cfg.NumHiddenLayers != 36 || cfg.IntermediateSize != 9728 {
		t.Errorf("got %+v", *cfg)
	}
	// 4,022,468,096 parameters: Qwen3-4B's published count (tied embeddings counted once).
	if n := cfg.NumParameters(); n != 4022468096 {
		t.Errorf("NumParameters = %d, want 4022468096", n)
	}
}

func TestParseConfigVariants(t *testing.T) {
	cases := []struct {
		name, json string
		check      func(*Config) bool
	}{
		{"rope_parameters", `{"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}`,
			func(c *Config) bool { return c.RopeTheta == 5e5 }},
		{"null kv heads", `{"num_attention_heads": 8, "num_key_value_heads": null}`,
			func(c *Config) bool { return c.NumKeyValueHeads == 8 }},
		{"null head_dim", `{"hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": null}`,
			func(c *Config) bool { return c.HeadDim == 32 }},
		{"eos list", `{"eos_token_id": [151645, 151643]}`,
			func(c *Config) bool { return slices.Equal(c.EOSTokenIDs, []int{151645, 151643}) }},
		{"default rope_scaling", `{"rope_scaling": {"rope_type": "default"}}`,
			func(c *Config) bool { return c.RopeTheta == 10000 }},
		{"sliding window off", `{"use_sliding_window": false, "sliding_window": 4096}`,
			func(c *Config) bool { return true }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(c.json))
			if err != nil {
				t.Fatal(err)
			}
			if !c.check(cfg) {
				t.Errorf("got %+v", *cfg)
			}
		})
	}
}

// TestParseConfigRefuses checks that unimplemented features fail with an
// error that starts with the offending key.
func TestParseConfigRefuses(t *testing.T) {
	cases := []struct{ json, key string }{
		{`{"model_type": "llama"}`, "model_type"},
		{`{"rope_scaling": {"rope_type": "yarn", "factor": 4}}`, "rope_scaling"},
		{`{"rope_scaling": {"type": "linear", "factor": 2}}`, "rope_scaling"},
		{`{"rope_parameters": {"rope_type": "llama3", "rope_theta": 5e5}}`, "rope_parameters.rope_type"},
		{`{"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}}`, "rope_parameters.partial_rotary_factor"},
		{`{"use_sliding_window": true, "sliding_window": 4096}`, "use_sliding_window"},
		{`{"num_hidden_layers": 2, "layer_types": ["full_attention", "sliding_attention"]}`, "layer_types[1]"},
		{`{"hidden_act": "gelu"}`, "hidden_act"},
		{`{"attention_dropout": 0.1}`, "attention_dropout"},
		{`{"num_attention_heads": 6, "num_key_value_heads": 4}`, "num_attention_heads"},
		{`{"head_dim": 7}`, "head_dim"},
		{`{"hidden_size": "big"}`, "hidden_size"},
		{`{"vocab_size": 0}`, "vocab_size"},
		{`not json`, "bad JSON"},
	}
	for _, c := range cases {
		_, err := ParseConfig([]byte(c.json))
		if err == nil || !strings.HasPrefix(err.Error(), c.key) {
			t.Errorf("%s: error %v, want one starting with %q", c.json, err, c.key)
		}
	}
}

func TestConfigJSONRoundTrip(t *testing.T) {
	want := testConfig()
	want.AttentionBias = true
	want.EOSTokenIDs = []int{2, 3}
	data, err := want.hfConfigJSON("bfloat16")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != want.String() || !slices.Equal(got.EOSTokenIDs, want.EOSTokenIDs) ||
		got.BOSTokenID != want.BOSTokenID || got.InitializerRange != want.InitializerRange ||
		got.MaxPositionEmbeddings != want.MaxPositionEmbeddings {
		t.Errorf("round trip: got %+v, want %+v", *got, *want)
	}
}

func TestSettingsValidate(t *testing.T) {
	cases := []struct {
		edit func(*Settings)
		key  string // "" = valid
	}{
		{func(s *Settings) {}, ""},
		{func(s *Settings) { s.DType = "bfloat16"; s.BackendConfig.Name = "xla"; s.BackendConfig.Plugin = "cuda" }, ""},
		{func(s *Settings) { s.DType = "float16" }, "dtype"},
		{func(s *Settings) { s.BackendConfig.Name = "tpu" }, "backend"},
		{func(s *Settings) { s.BackendConfig.Plugin = "cuda" }, "plugin"},
		{func(s *Settings) { s.HiddenSize = -1 }, "hidden_size"},
		{func(s *Settings) { s.EOSTokenIDs = []int{200000} }, "bos_token_id/eos_token_id"},
		{func(s *Settings) { s.BackendConfig.GCPercent = -5 }, "gc_percent"},
		{func(s *Settings) { s.BackendConfig.GCPercent = 0; s.BackendConfig.SimpleGoOps = true }, ""},
		{func(s *Settings) { s.BackendConfig.Name = "xla"; s.BackendConfig.SimpleGoOps = true }, "simplego_ops"},
	}
	if xla := (backend.Config{Name: "xla"}); xla.Validate() != nil { // built with -tags noxla
		cases[1].key = "backend"
	}
	for i, c := range cases {
		s := DefaultSettings()
		c.edit(&s)
		err := s.Validate()
		if c.key == "" && err != nil {
			t.Errorf("case %d: unexpected error %v", i, err)
		}
		if c.key != "" && (err == nil || !strings.HasPrefix(err.Error(), c.key)) {
			t.Errorf("case %d: error %v, want one starting with %q", i, err, c.key)
		}
	}
}
