package model

// LoRA adapter checkpoints in PEFT's format (package model/checkpoint
// reads and writes the files): loading one onto its base, saving one, and
// merging an adapter into the base weights.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/model/checkpoint"
	"github.com/mageguard/mageguard/model/safetensors"
)

// AdapterOf returns, for a checkpoint directory, the base checkpoint
// directory and the LoRA adapter it holds: dir and nil for a whole model;
// for an adapter directory (adapter_config.json), the base it names
// (base_model_name_or_path, absolute or relative to dir) and the adapter's
// configuration. No weight is read.
func AdapterOf(dir string) (base string, lora *LoRAConfig, err error) {
	if !checkpoint.IsAdapter(dir) {
		return dir, nil, nil
	}
	cfg, err := checkpoint.ReadAdapterConfig(dir)
	if err != nil {
		return "", nil, err
	}
	lc := LoRAConfig{Rank: cfg.R, Alpha: cfg.LoRAAlpha, Targets: cfg.TargetModules, RSLoRA: cfg.UseRSLoRA}
	if err := lc.Validate(); err != nil {
		return "", nil, fmt.Errorf("adapter %s: %w (only Qwen3's decoder-layer projections can be adapted)", dir, err)
	}
	base = cfg.BaseDir(dir)
	if _, err := os.Stat(base); err != nil {
		hint := ""
		if !filepath.IsAbs(cfg.BaseModelNameOrPath) {
			hint = " (a relative base_model_name_or_path is read from the adapter directory; a Hugging Face hub name such as Qwen/Qwen3-4B must be downloaded and named by its directory)"
		}
		return "", nil, fmt.Errorf("adapter %s: its base model %s (base_model_name_or_path %q) cannot be read: %w%s",
			dir, base, cfg.BaseModelNameOrPath, err, hint)
	}
	if checkpoint.IsAdapter(base) {
		return "", nil, fmt.Errorf("adapter %s: its base %s is an adapter too: merge that one first (mageguard model merge)", dir, base)
	}
	return base, &lc, nil
}

// loadAdapter loads the adapter checkpoint dir onto its base (LoadWith). The adapter's
// tensors are checked against the base's config.json before any weight is read.
func loadAdapter(backend backends.Backend, dir string, opts LoadOptions) (*Model, error) {
	base, lc, err := AdapterOf(dir)
	if err != nil {
		return nil, err
	}
	a, err := newAdapter(*lc, base)
	if err != nil {
		return nil, err
	}
	cfg, err := LoadConfig(base)
	if err != nil {
		return nil, fmt.Errorf("adapter %s: base %s: %w", dir, base, err)
	}
	f, err := safetensors.Open(filepath.Join(dir, checkpoint.AdapterWeightsFile))
	if err != nil {
		return nil, fmt.Errorf("adapter %s: %w", dir, err)
	}
	defer f.Close()
	ts, err := adapterTensors(f, dir, base, cfg, a)
	if err != nil {
		return nil, err
	}
	m, err := LoadWith(backend, base, opts)
	if err != nil {
		return nil, fmt.Errorf("adapter %s: base %s: %w", dir, base, err)
	}
	if err := m.readAdapter(f, dir, ts); err != nil {
		return nil, err
	}
	m.attach(a)
	return m, nil
}

// adapterTensor is one tensor of an adapter file: its PEFT name, the module it adapts, which
// matrix ("A" or "B") and its shape.
type adapterTensor struct {
	name, module, which string
	shape               []int
}

// adapterTensors returns the tensors adapter_model.safetensors (f) of the adapter dir must hold
// for a on a base of architecture cfg, in adapterSpecs's order (as AddAdapter creates the
// variables: the trainer's order), after checking f's header against them: a missing,
// unexpected or misshaped tensor is an error naming the adapter and its base.
func adapterTensors(f *safetensors.File, dir, base string, cfg *Config, a *adapter) ([]adapterTensor, error) {
	arch := fmt.Sprintf("%d layers, hidden %d, MLP %d, %d×%d query / %d KV heads",
		cfg.NumHiddenLayers, cfg.HiddenSize, cfg.IntermediateSize, cfg.NumAttentionHeads, cfg.HeadDim, cfg.NumKeyValueHeads)
	var want []adapterTensor
	byName := map[string]bool{}
	for _, s := range adapterSpecs(cfg, a.targets) {
		for _, w := range []adapterTensor{{module: s.module, which: "A", shape: []int{a.cfg.Rank, s.in}}, {module: s.module, which: "B", shape: []int{s.out, a.cfg.Rank}}} {
			w.name = checkpoint.AdapterTensorName(s.module, w.which)
			want = append(want, w)
			byName[w.name] = true
		}
	}
	for _, name := range f.Names() {
		if !byName[name] {
			return nil, fmt.Errorf("adapter %s: tensor %s does not fit the base %s (%s): an adapter of another architecture, or of other target_modules",
				dir, name, base, arch)
		}
	}
	for _, w := range want {
		e, ok := f.Entry(w.name)
		if !ok {
			return nil, fmt.Errorf("adapter %s: tensor %s is missing for the base %s (%s): an adapter of another architecture?", dir, w.name, base, arch)
		}
		if !slices.Equal(e.Shape, w.shape) {
			return nil, fmt.Errorf("adapter %s: tensor %s has shape %v, the base %s (%s) with rank %d wants %v: an adapter of another architecture",
				dir, w.name, e.Shape, base, arch, a.cfg.Rank, w.shape)
		}
	}
	return want, nil
}

// readAdapter reads the adapter's tensors (checked by adapterTensors) from f into the model's
// adapter variables.
func (m *Model) readAdapter(f *safetensors.File, dir string, ts []adapterTensor) error {
	for _, w := range ts {
		t := tensors.FromShape(shapes.Make(m.dtype, w.shape...))
		if err := f.ReadInto(w.name, t); err != nil {
			return fmt.Errorf("adapter %s: %w", dir, err)
		}
		m.setAdapterWeight(w.module, w.which, t)
	}
	return nil
}

// SaveAdapter writes the model's LoRA adapter as a PEFT adapter directory:
// adapter_config.json (peft_type LORA, task_type CAUSAL_LM, r, lora_alpha,
// target_modules, bias "none", use_rslora, and base_model_name_or_path: the
// base checkpoint's absolute path) and adapter_model.safetensors with PEFT's
// names and shapes (base_model.model.<module>.lora_A.weight [r, in],
// ….lora_B.weight [out, r]), plus the tokenizer files of opts. opts.DType
// and opts.Values apply to the adapter's weights as Save applies them to the
// model's; MaxShardBytes is ignored (one file).
func (m *Model) SaveAdapter(dir string, opts SaveOptions) error {
	if m.lora == nil {
		return fmt.Errorf("save %s: the model has no LoRA adapter", dir)
	}
	if m.lora.base == "" {
		return fmt.Errorf("save %s: the adapter has no base checkpoint directory to name (a random base)", dir)
	}
	stDType, _, err := storageDType(opts.DType, m.dtype)
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	tok, err := opts.tokenizerFiles()
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	var ts []safetensors.Tensor
	for _, s := range adapterSpecs(&m.cfg, m.lora.targets) {
		for _, which := range []string{"A", "B"} {
			v := m.ctx.GetVariableByScopeAndName(adapterVarPath(s.module, which))
			if v == nil {
				return fmt.Errorf("save %s: no variable for the adapter of %s", dir, s.module)
			}
			t, err := v.Value()
			if err != nil {
				return fmt.Errorf("save %s: %w", dir, err)
			}
			if x := opts.Values[v.ScopeAndName()]; x != nil {
				if !x.Shape().Equal(shapes.Make(x.DType(), v.Shape().Dimensions...)) {
					return fmt.Errorf("save %s: the value given for %s has shape %v, want %v", dir, v.ScopeAndName(), x.Shape().Dimensions, v.Shape().Dimensions)
				}
				t = x
			}
			name := checkpoint.AdapterTensorName(s.module, which)
			ts = append(ts, safetensors.Tensor{Name: name, DType: stDType, Shape: v.Shape().Dimensions, Src: t})
		}
	}
	c := m.lora.cfg
	return checkpoint.WriteAdapter(dir, checkpoint.AdapterContents{
		Config: checkpoint.AdapterConfig{
			PEFTType: "LORA", TaskType: "CAUSAL_LM", R: c.Rank, LoRAAlpha: c.Alpha,
			TargetModules: slices.Clone(c.Targets), Bias: "none", UseRSLoRA: c.RSLoRA,
			BaseModelNameOrPath: m.lora.base, InferenceMode: true, InitLoRAWeights: true,
		},
		Weights:   ts,
		Tokenizer: tok,
	})
}

// MergeAdapter folds the LoRA adapter into the base weights, W ← W + s·B·A
// on every adapted module (PEFT's merge_and_unload), and removes it: the
// model is then a whole model, with every weight trainable. Each element of
// B·A is summed in float64 and W + s·(B·A) rounded once to the model's
// dtype. Compiled graphs are dropped.
func (m *Model) MergeAdapter() error {
	if m.lora == nil {
		return errors.New("model: no LoRA adapter to merge")
	}
	for _, s := range adapterSpecs(&m.cfg, m.lora.targets) {
		w, err := m.weightTensor(s.module + ".weight")
		if err != nil {
			return err
		}
		a, b, err := m.adapterValues(s.module)
		if err != nil {
			return err
		}
		merged := mergeRows(hostFloat32(w), a, b, s.out, s.in, m.lora.cfg.Rank, m.lora.scale)
		v := m.ctx.GetVariableByScopeAndName(varPath(s.module + ".weight"))
		if err := v.SetValue(m.fromFloat32(merged, s.out, s.in)); err != nil {
			return fmt.Errorf("model: merge the adapter into %s: %w", s.module, err)
		}
		for _, which := range []string{"A", "B"} {
			if err := m.ctx.DeleteVariable(adapterVarPath(s.module, which)); err != nil {
				return fmt.Errorf("model: remove the adapter of %s: %w", s.module, err)
			}
		}
	}
	m.lora = nil
	for v := range m.ctx.IterVariables() {
		v.SetTrainable(true)
	}
	m.mu.Lock()
	m.logits, m.score, m.prefill, m.extend = nil, nil, nil, nil
	m.mu.Unlock()
	return nil
}

// adapterValues returns module's A [r, in] and B [out, r] as float32.
func (m *Model) adapterValues(module string) (a, b []float32, err error) {
	get := func(which string) ([]float32, error) {
		v := m.ctx.GetVariableByScopeAndName(adapterVarPath(module, which))
		if v == nil {
			return nil, fmt.Errorf("model: no adapter variable %s of %s", which, module)
		}
		t, err := v.Value()
		if err != nil {
			return nil, err
		}
		return hostFloat32(t), nil
	}
	if a, err = get("A"); err != nil {
		return nil, nil, err
	}
	b, err = get("B")
	return a, b, err
}

// mergeRows returns w + s·b·a for w [out, in], b [out, r], a [r, in] (row-major), each
// element of b·a summed in float64, rows computed in parallel.
func mergeRows(w, a, b []float32, out, in, r int, s float64) []float32 {
	res := make([]float32, len(w))
	var wg sync.WaitGroup
	workers := runtime.GOMAXPROCS(0)
	for k := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			acc := make([]float64, in)
			for o := k; o < out; o += workers {
				clear(acc)
				for j := range r {
					bj := float64(b[o*r+j])
					for i, x := range a[j*in : (j+1)*in] {
						acc[i] += bj * float64(x)
					}
				}
				for i := range in {
					res[o*in+i] = float32(float64(w[o*in+i]) + s*acc[i])
				}
			}
		}()
	}
	wg.Wait()
	return res
}

// hostFloat32 returns a float32 copy of a float32 or bfloat16 tensor.
func hostFloat32(t *tensors.Tensor) []float32 {
	if t.DType() == dtypes.BFloat16 {
		src := tensors.MustCopyFlatData[bfloat16.BFloat16](t)
		out := make([]float32, len(src))
		for i, x := range src {
			out[i] = x.Float32()
		}
		return out
	}
	return tensors.MustCopyFlatData[float32](t)
}
