package model

// LoRA adapters (Hu et al., 2021, as PEFT implements them): a targeted
// linear projection computes
//
//	y = x·Wᵀ (+ b) + s·(x·Aᵀ)·Bᵀ,   A [r, in], B [out, r],   s = α/r (rsLoRA: α/√r)
//
// with the base weight W frozen and A, B trained. A starts Kaiming-uniform
// as PEFT draws it (U(−1/√in, 1/√in)) and B at zero, so a new adapter leaves
// the model's outputs exactly the base's. The adapter's variables live in
// their own scope of the model's context (AdapterScope + the module's
// path: /lora/model/layers/0/self_attn/q_proj/lora_A), and only they are
// trainable while an adapter is attached. Through WithoutAdapter(ctx) the
// same weights compute the base model: the KL reference of LoRA training
// needs no second copy of the model.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/model/checkpoint"
	"github.com/mageguard/mageguard/model/safetensors"
)

// AdapterScope is the context scope of the adapter's variables.
const AdapterScope = "/lora"

// LoRAConfig is the `model.lora` section: a LoRA adapter trained on a
// frozen base (train, sft).
type LoRAConfig struct {
	Rank    int      `yaml:"rank" json:"rank"`       // r; 0 = no adapter: every weight is trained
	Alpha   float64  `yaml:"alpha" json:"alpha"`     // α: the adapter's output is scaled by α/r (rsLoRA: α/√r)
	Targets []string `yaml:"targets" json:"targets"` // the adapted projections of every decoder layer (PEFT's module names)
	RSLoRA  bool     `yaml:"rslora" json:"rslora"`   // scale by α/√r (rank-stabilized LoRA) instead of α/r
}

// DefaultLoRAConfig is no adapter; with a rank, α 32 on all seven linear
// projections (q, k, v, o, gate, up, down), as TRL's defaults and "LoRA
// Without Regret" advise for reinforcement learning.
func DefaultLoRAConfig() LoRAConfig {
	return LoRAConfig{Alpha: 32, Targets: slices.Clone(checkpoint.AllLinear)}
}

// Validate checks the section; errors start with the key.
func (c *LoRAConfig) Validate() error {
	if c.Rank < 0 {
		return fmt.Errorf("lora.rank must be >= 0 (0 = no adapter), got %d", c.Rank)
	}
	if c.Rank == 0 {
		return nil
	}
	if !(c.Alpha > 0) || math.IsInf(c.Alpha, 0) {
		return fmt.Errorf("lora.alpha must be a finite number > 0, got %v", c.Alpha)
	}
	if len(c.Targets) == 0 {
		return fmt.Errorf("lora.targets is empty: name some of %v", checkpoint.AllLinear)
	}
	seen := map[string]bool{}
	for _, t := range c.Targets {
		if !slices.Contains(checkpoint.AllLinear, t) {
			return fmt.Errorf("lora.targets: %q is not one of %v", t, checkpoint.AllLinear)
		}
		if seen[t] {
			return fmt.Errorf("lora.targets: %q given twice", t)
		}
		seen[t] = true
	}
	return nil
}

// Scale is s = α/r, or α/√r with rsLoRA.
func (c *LoRAConfig) Scale() float64 {
	if c.RSLoRA {
		return c.Alpha / math.Sqrt(float64(c.Rank))
	}
	return c.Alpha / float64(c.Rank)
}

// String summarizes the adapter on one line.
func (c *LoRAConfig) String() string {
	s := fmt.Sprintf("LoRA rank %d, alpha %g (scale %.4g", c.Rank, c.Alpha, c.Scale())
	if c.RSLoRA {
		s += ", rsLoRA"
	}
	return s + ") on " + strings.Join(c.Targets, ", ")
}

// sameAdapter reports whether two configurations describe the same adapter.
func (c *LoRAConfig) sameAdapter(o *LoRAConfig) bool {
	a, b := slices.Clone(c.Targets), slices.Clone(o.Targets)
	slices.Sort(a)
	slices.Sort(b)
	return c.Rank == o.Rank && c.Alpha == o.Alpha && c.RSLoRA == o.RSLoRA && slices.Equal(a, b)
}

// adapter is the LoRA adapter attached to a Model.
type adapter struct {
	cfg     LoRAConfig
	scale   float64
	targets map[string]bool // module names (q_proj, …)
	base    string          // the base checkpoint directory, absolute: written as base_model_name_or_path
}

// Adapter returns the configuration of the model's LoRA adapter, or nil
// when it has none.
func (m *Model) Adapter() *LoRAConfig {
	if m.lora == nil {
		return nil
	}
	c := m.lora.cfg
	c.Targets = slices.Clone(c.Targets)
	return &c
}

// AdapterBase returns the base checkpoint directory of the model's adapter
// ("" without one).
func (m *Model) AdapterBase() string {
	if m.lora == nil {
		return ""
	}
	return m.lora.base
}

// adapterSpec is one adapted module of one layer: its path (model.layers.N.self_attn.q_proj)
// and its weight's shape [out, in].
type adapterSpec struct {
	module  string
	out, in int
}

// adapterSpecs lists the modules an adapter on targets adapts, layer by layer, in the order of
// tensorSpecs.
func adapterSpecs(c *Config, targets map[string]bool) []adapterSpec {
	var out []adapterSpec
	for _, s := range tensorSpecs(c) {
		if s.kind != kindLinear || !strings.HasPrefix(s.name, "model.layers.") {
			continue
		}
		module := strings.TrimSuffix(s.name, ".weight")
		if targets[module[strings.LastIndex(module, ".")+1:]] {
			out = append(out, adapterSpec{module: module, out: s.shape[0], in: s.shape[1]})
		}
	}
	return out
}

// NumAdapterParameters counts the parameters of an adapter of rank r on targets of a model of
// architecture c: r·(in + out) for every adapted module of every layer.
func NumAdapterParameters(c *Config, r int, targets []string) int64 {
	set := map[string]bool{}
	for _, t := range targets {
		set[t] = true
	}
	var n int64
	for _, s := range adapterSpecs(c, set) {
		n += int64(r) * int64(s.in+s.out)
	}
	return n
}

// adapterVarPath is the scope and name of module's A ("A") or B ("B") variable.
func adapterVarPath(module, which string) (scope, name string) {
	return AdapterScope + "/" + strings.ReplaceAll(module, ".", "/"), "lora_" + which
}

// AddAdapter attaches a new LoRA adapter of cfg to the model, on the base
// checkpoint directory base (written into adapter checkpoints as
// base_model_name_or_path; "" for a model that is not on disk, whose adapter
// cannot be saved): A drawn Kaiming-uniform as PEFT does,
// U(−1/√in, 1/√in), from a PCG stream seeded with seed (the same adapter on
// every backend), B zero. The base weights stop being trainable.
func (m *Model) AddAdapter(cfg LoRAConfig, seed int64, base string) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if cfg.Rank == 0 {
		return fmt.Errorf("model: a LoRA adapter needs lora.rank >= 1")
	}
	if m.lora != nil {
		return fmt.Errorf("model: the model already has a LoRA adapter")
	}
	a, err := newAdapter(cfg, base)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x4c6f5241)) // "LoRA"
	for _, s := range adapterSpecs(&m.cfg, a.targets) {
		bound := 1 / math.Sqrt(float64(s.in))
		values := make([]float32, cfg.Rank*s.in)
		for i := range values {
			values[i] = float32((2*rng.Float64() - 1) * bound)
		}
		m.setAdapterWeight(s.module, "A", m.fromFloat32(values, cfg.Rank, s.in))
		m.setAdapterWeight(s.module, "B", tensors.FromShape(shapes.Make(m.dtype, s.out, cfg.Rank)))
	}
	m.attach(a)
	return nil
}

// newAdapter builds the adapter of cfg on base (made absolute; "" = none, e.g. a random model's:
// such an adapter cannot be saved).
func newAdapter(cfg LoRAConfig, base string) (*adapter, error) {
	abs := ""
	if base != "" {
		var err error
		if abs, err = filepath.Abs(base); err != nil {
			return nil, fmt.Errorf("model: adapter base %s: %w", base, err)
		}
	}
	cfg.Targets = slices.Clone(cfg.Targets)
	a := &adapter{cfg: cfg, scale: cfg.Scale(), targets: map[string]bool{}, base: abs}
	for _, t := range cfg.Targets {
		a.targets[t] = true
	}
	return a, nil
}

// attach makes a the model's adapter: its variables trainable, the base's not.
func (m *Model) attach(a *adapter) {
	m.lora = a
	for v := range m.ctx.IterVariables() {
		v.SetTrainable(strings.HasPrefix(v.Scope(), AdapterScope+"/"))
	}
}

// setAdapterWeight stores t as module's A or B variable.
func (m *Model) setAdapterWeight(module, which string, t *tensors.Tensor) {
	scope, name := adapterVarPath(module, which)
	m.ctx.InAbsPath(scope).VariableWithValue(name, t)
}

// fromFloat32 returns values [dims] as a tensor of the model's dtype (bfloat16 rounded to
// nearest even).
func (m *Model) fromFloat32(values []float32, dims ...int) *tensors.Tensor {
	if m.dtype != dtypes.BFloat16 {
		return tensors.FromFlatDataAndDimensions(values, dims...)
	}
	b := make([]bfloat16.BFloat16, len(values))
	for i, x := range values {
		b[i] = safetensors.BF16FromFloat32(x)
	}
	return tensors.FromFlatDataAndDimensions(b, dims...)
}

// adapterOffParam is the context parameter WithoutAdapter sets.
const adapterOffParam = "mageguard_lora_off"

// WithoutAdapter returns a reference to ctx (the model's context, or a scope of it) through
// which the forward pass skips the LoRA adapter: the base model, on the same weights. With a
// trainer, log-probs computed through it are the frozen base's — the KL reference of LoRA
// training. A model without an adapter computes the same through either.
func WithoutAdapter(ctx *context.Context) *context.Context {
	c := ctx.In("without_adapter")
	c.SetParam(adapterOffParam, true)
	return c
}

// withAdapter adds the LoRA term s·(x·Aᵀ)·Bᵀ of module name to y = x·Wᵀ (+ b), when the
// module is adapted and ctx does not switch the adapter off.
func (m *Model) withAdapter(ctx *context.Context, x, y *Node, name string) *Node {
	if m.lora == nil || !m.lora.targets[name[strings.LastIndex(name, ".")+1:]] || context.GetParamOr(ctx, adapterOffParam, false) {
		return y
	}
	g := x.Graph()
	get := func(which string) *Node {
		scope, vname := adapterVarPath(name, which)
		v := ctx.GetVariableByScopeAndName(scope, vname)
		if v == nil {
			panic(fmt.Sprintf("model: adapter variable %s/%s not in this context: pass Model.Context() or a scope of it", scope, vname))
		}
		return v.ValueGraph(g)
	}
	a, b := get("A"), get("B")                                                 // [r, in], [out, r]
	xa := DotGeneral(x, []int{x.Rank() - 1}, nil, a, []int{1}, nil)            // [..., r]
	xa = MulScalar(xa, m.lora.scale)                                           // s·x·Aᵀ
	return Add(y, DotGeneral(xa, []int{xa.Rank() - 1}, nil, b, []int{1}, nil)) // + s·(x·Aᵀ)·Bᵀ
}
