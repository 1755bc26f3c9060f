package model

// Weights: the one table that maps Hugging Face tensor names to the
// model's GoMLX variables, and random initialization. Checkpoints are read
// and written by load.go and save.go, through package model/checkpoint.

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/model/safetensors"
)

// tensorKind says how a tensor is randomly initialized.
type tensorKind int

const (
	kindEmbed  tensorKind = iota // N(0, initializer_range²)
	kindLinear                   // N(0, initializer_range²)
	kindBias                     // zeros
	kindNorm                     // ones
)

// tensorSpec is one weight of the model: its Hugging Face name and shape.
// The GoMLX variable of a tensor lives at the scope made of the name's
// dotted parts, e.g. "model.layers.0.self_attn.q_proj.weight" is variable
// "weight" in scope "/model/layers/0/self_attn/q_proj".
type tensorSpec struct {
	name  string
	shape []int
	kind  tensorKind
}

// tensorSpecs lists every tensor of a Qwen3ForCausalLM checkpoint with this
// architecture, in the order Hugging Face writes them.
func tensorSpecs(c *Config) []tensorSpec {
	H, D, I, V := c.HiddenSize, c.HeadDim, c.IntermediateSize, c.VocabSize
	nq, nkv := c.NumAttentionHeads, c.NumKeyValueHeads
	specs := []tensorSpec{{"model.embed_tokens.weight", []int{V, H}, kindEmbed}}
	for i := 0; i < c.NumHiddenLayers; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		specs = append(specs,
			tensorSpec{p + "input_layernorm.weight", []int{H}, kindNorm},
			tensorSpec{p + "self_attn.q_proj.weight", []int{nq * D, H}, kindLinear},
			tensorSpec{p + "self_attn.k_proj.weight", []int{nkv * D, H}, kindLinear},
			tensorSpec{p + "self_attn.v_proj.weight", []int{nkv * D, H}, kindLinear},
			tensorSpec{p + "self_attn.o_proj.weight", []int{H, nq * D}, kindLinear},
		)
		if c.AttentionBias {
			specs = append(specs,
				tensorSpec{p + "self_attn.q_proj.bias", []int{nq * D}, kindBias},
				tensorSpec{p + "self_attn.k_proj.bias", []int{nkv * D}, kindBias},
				tensorSpec{p + "self_attn.v_proj.bias", []int{nkv * D}, kindBias},
				tensorSpec{p + "self_attn.o_proj.bias", []int{H}, kindBias},
			)
		}
		specs = append(specs,
			tensorSpec{p + "self_attn.q_norm.weight", []int{D}, kindNorm},
			tensorSpec{p + "self_attn.k_norm.weight", []int{D}, kindNorm},
			tensorSpec{p + "post_attention_layernorm.weight", []int{H}, kindNorm},
			tensorSpec{p + "mlp.gate_proj.weight", []int{I, H}, kindLinear},
			tensorSpec{p + "mlp.up_proj.weight", []int{I, H}, kindLinear},
			tensorSpec{p + "mlp.down_proj.weight", []int{H, I}, kindLinear},
		)
	}
	specs = append(specs, tensorSpec{"model.norm.weight", []int{H}, kindNorm})
	if !c.TieWordEmbeddings {
		specs = append(specs, tensorSpec{"lm_head.weight", []int{V, H}, kindEmbed})
	}
	return specs
}

// varPath maps a Hugging Face tensor name to its variable's scope and name.
func varPath(hfName string) (scope, name string) {
	parts := strings.Split(hfName, ".")
	return "/" + strings.Join(parts[:len(parts)-1], "/"), parts[len(parts)-1]
}

// ParseDType maps "float32" / "bfloat16" (or "f32" / "bf16") to a dtype.
func ParseDType(s string) (dtypes.DType, error) {
	switch strings.ToLower(s) {
	case "float32", "f32", "fp32", "":
		return dtypes.Float32, nil
	case "bfloat16", "bf16":
		return dtypes.BFloat16, nil
	}
	return dtypes.InvalidDType, fmt.Errorf("dtype must be float32 or bfloat16, got %q", s)
}

// newModel builds a Model around an empty context.
func newModel(backend backends.Backend, cfg *Config, dtype dtypes.DType) (*Model, error) {
	if backend == nil {
		return nil, fmt.Errorf("model: nil backend")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model config: %w", err)
	}
	if dtype != dtypes.Float32 && dtype != dtypes.BFloat16 {
		return nil, fmt.Errorf("model: dtype must be float32 or bfloat16, got %s", dtype)
	}
	c := *cfg
	c.EOSTokenIDs = append([]int(nil), cfg.EOSTokenIDs...)
	return &Model{cfg: c, dtype: dtype, backend: backend, ctx: context.New(), lmHeadChunk: DefaultLMHeadChunk, attentionBlock: DefaultAttentionBlock}, nil
}

// setWeight stores t as the (trainable) variable of HF tensor name.
func (m *Model) setWeight(name string, t *tensors.Tensor) {
	scope, vname := varPath(name)
	m.ctx.InAbsPath(scope).VariableWithValue(vname, t)
}

// weightTensor returns the current value of HF tensor name.
func (m *Model) weightTensor(name string) (*tensors.Tensor, error) {
	scope, vname := varPath(name)
	v := m.ctx.GetVariableByScopeAndName(scope, vname)
	if v == nil {
		return nil, fmt.Errorf("model: no variable for tensor %s", name)
	}
	return v.Value()
}

// New returns a randomly initialized model, as transformers initializes
// Qwen3: linear and embedding weights ~ N(0, initializer_range²), norm
// weights 1, biases 0. Values are drawn in float64 from a PCG stream seeded
// with seed, rounded to float32 (then to bfloat16, nearest-even, when dtype
// is BFloat16), so a seed gives the same weights on every backend.
func New(b backends.Backend, cfg *Config, seed int64, dtype dtypes.DType) (*Model, error) {
	m, err := newModel(b, cfg, dtype)
	if err != nil {
		return nil, err
	}
	// Every architecture key is bounded (Config.Validate), so this product
	// does not overflow; refuse what cannot fit before allocating it.
	if need, have := m.cfg.NumParameters()*int64(dtype.Size()), backend.MachineMemory(); have > 0 && need > have {
		return nil, fmt.Errorf("model: %d parameters take %.1f GB in %s, more than this machine's %.1f GB of memory (check the model.* architecture keys)",
			m.cfg.NumParameters(), float64(need)/1e9, dtype, float64(have)/1e9)
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	std := m.cfg.InitializerRange
	for _, s := range tensorSpecs(&m.cfg) {
		t := tensors.FromShape(shapes.Make(dtype, s.shape...))
		value := func() float32 {
			switch s.kind {
			case kindNorm:
				return 1
			case kindBias:
				return 0
			default:
				return float32(rng.NormFloat64() * std)
			}
		}
		if dtype == dtypes.BFloat16 {
			tensors.MustMutableFlatData(t, func(flat []bfloat16.BFloat16) {
				for i := range flat {
					flat[i] = safetensors.BF16FromFloat32(value())
				}
			})
		} else {
			tensors.MustMutableFlatData(t, func(flat []float32) {
				for i := range flat {
					flat[i] = value()
				}
			})
		}
		m.setWeight(s.name, t)
	}
	return m, nil
}

// NumParameters counts the model's weights.
func (m *Model) NumParameters() int64 { return m.cfg.NumParameters() }
