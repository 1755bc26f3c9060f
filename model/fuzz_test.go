package model

import (
	"testing"
)

// FuzzParseConfig: any config.json either parses into an architecture
// within every bound — whose parameter count does not overflow — or is an
// error. The seeds hold a num_hidden_layers of 10⁹.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"model_type": "qwen3", "vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "bos_token_id": 1, "eos_token_id": [2]}`))
	f.Add([]byte(`{"model_type": "qwen3", "num_hidden_layers": 1000000000}`))
	f.Add([]byte(`{"model_type": "qwen3", "hidden_size": 65536, "vocab_size": 4194304, "intermediate_size": 262144, "num_hidden_layers": 1024, "head_dim": 1024, "num_attention_heads": 1024, "num_key_value_heads": 1024}`))
	f.Add([]byte(`{"rope_scaling": {"rope_type": "yarn"}}`))
	f.Add([]byte(`{"head_dim": null, "num_key_value_heads": null, "eos_token_id": 7}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(data)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("ParseConfig accepted an invalid config: %v", err)
		}
		if n := cfg.NumParameters(); n <= 0 || n > 1<<50 {
			t.Fatalf("%d parameters", n)
		}
	})
}
