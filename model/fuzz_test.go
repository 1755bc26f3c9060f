package model

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// FuzzSafetensors: any file either opens, with every tensor then read in
// full, or is an error — never a panic or an allocation the file's size
// does not back. The seeds hold the header declaring shape
// [2³², 2³²] and a tensor with a NaN.
func FuzzSafetensors(f *testing.F) {
	file := func(header string, data []byte) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
		return append(append(b, header...), data...)
	}
	nan := binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(math.NaN())))
	f.Add(file(`{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`, make([]byte, 16)))
	f.Add(file(`{"exp_avg/w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, make([]byte, 16)))
	f.Add(file(`{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, nan))
	f.Add(file(`{"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},"__metadata__":{"format":"pt"}}`, make([]byte, 6)))
	f.Add(file(`{"w":{"dtype":"F16","shape":[],"data_offsets":[0,2]}}`, []byte{0, 0x7c}))
	path := filepath.Join(f.TempDir(), "f.safetensors") // a worker runs its inputs one at a time
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := openSafetensors(path)
		if err != nil {
			return
		}
		defer st.Close()
		var total int64
		for name, e := range st.entries {
			n := int64(1)
			for _, d := range e.Shape {
				n *= int64(d)
			}
			total += n * stWidth[e.DType]
			if total > int64(len(data)) {
				t.Fatalf("the header declares %d bytes of tensors in a %d-byte file", total, len(data))
			}
			for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
				dst := tensors.FromShape(shapes.Make(dt, e.Shape...))
				st.readInto(name, dst) // an error (non-finite values) is fine
			}
		}
	})
}

// FuzzParseConfig: any config.json either parses into an architecture
// within every bound — whose parameter count does not overflow — or is an
// error. The seeds hold the num_hidden_layers of 10⁹.
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
