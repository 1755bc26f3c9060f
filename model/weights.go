package model

// Weights: the one table that maps Hugging Face tensor names to the
// model's GoMLX variables, random initialization, and checkpoint load/save.

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/internal/strictjson"
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

// torchDTypeName is the config.json name of a dtype.
func torchDTypeName(dt dtypes.DType) string {
	if dt == dtypes.BFloat16 {
		return "bfloat16"
	}
	return "float32"
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
func New(backend backends.Backend, cfg *Config, seed int64, dtype dtypes.DType) (*Model, error) {
	m, err := newModel(backend, cfg, dtype)
	if err != nil {
		return nil, err
	}
	// Every architecture key is bounded (Config.Validate), so this product
	// does not overflow; refuse what cannot fit before allocating it.
	if need, have := m.cfg.NumParameters()*int64(dtype.Size()), totalMemory(); have > 0 && need > have {
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
					flat[i] = bf16FromFloat32(value())
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

// Load reads a Hugging Face Qwen3 checkpoint directory (config.json and
// model.safetensors, or shards listed in model.safetensors.index.json) into
// a float32 model. F32, BF16 and F16 weights are upcast exactly.
func Load(backend backends.Backend, dir string) (*Model, error) {
	return LoadAs(backend, dir, dtypes.Float32)
}

// LoadAs is Load with the weights stored (and computed) in dtype: Float32,
// or BFloat16 (F32/F16 weights rounded to nearest even). A checkpoint with
// a NaN or infinite weight is refused (LoadWith can allow it).
func LoadAs(backend backends.Backend, dir string, dtype dtypes.DType) (*Model, error) {
	return LoadWith(backend, dir, LoadOptions{DType: dtype})
}

// LoadOptions say how LoadWith loads a checkpoint.
type LoadOptions struct {
	DType dtypes.DType // Float32 or BFloat16; InvalidDType (the zero value) means Float32
	// AllowNonFinite loads weights that hold NaN or ±Inf, with a warning,
	// instead of refusing them (model.allow_non_finite). Such a model's
	// logits are NaN: its decisions mean nothing.
	AllowNonFinite bool
	Log            io.Writer // where the warning goes; nil = os.Stderr
}

// LoadWith reads a Hugging Face Qwen3 checkpoint directory (config.json and
// model.safetensors, or shards listed in model.safetensors.index.json).
// Before anything is allocated, config.json is checked (every architecture
// key in range) and every tensor the architecture needs is found in the
// safetensors headers with its shape, each header checked against its
// file's real size; then the weights are read one tensor at a time, and a
// tensor holding NaN or ±Inf is an error naming it (unless
// opts.AllowNonFinite).
func LoadWith(backend backends.Backend, dir string, opts LoadOptions) (*Model, error) {
	dtype := opts.DType
	if dtype == dtypes.InvalidDType {
		dtype = dtypes.Float32
	}
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	m, err := newModel(backend, cfg, dtype)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	files, where, err := openCheckpointFiles(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	specs := tensorSpecs(&m.cfg)
	expected := map[string]bool{}
	for _, s := range specs {
		expected[s.name] = true
		f, ok := where[s.name]
		if !ok {
			return nil, fmt.Errorf("checkpoint %s: tensor %s is missing", dir, s.name)
		}
		if e := f.entries[s.name]; !equalInts(e.Shape, s.shape) {
			return nil, fmt.Errorf("safetensors %s: tensor %s has shape %v, the config wants %v", f.path, s.name, e.Shape, s.shape)
		}
	}
	for _, name := range sortedKeys(where) {
		if expected[name] || (m.cfg.TieWordEmbeddings && name == "lm_head.weight") {
			continue // a tied checkpoint may still carry lm_head.weight; transformers ignores it too
		}
		return nil, fmt.Errorf("safetensors %s: unexpected tensor %s for this config (wrong config.json?)", where[name].path, name)
	}
	var garbage int64 // bytes of host copies released since the last collection
	var nonFinite []*NonFiniteError
	for _, s := range specs {
		f := where[s.name]
		t := tensors.FromShape(shapes.Make(dtype, s.shape...))
		shared := backend.HasSharedBuffers()
		if shared {
			// Move the (still untouched, zero) storage to a backend buffer first:
			// readInto then writes straight into the memory the model runs on.
			if err := t.MaterializeOnDevice(backend, true, 0); err != nil {
				return nil, fmt.Errorf("checkpoint %s: tensor %s: %w", dir, s.name, err)
			}
		}
		if err := f.readInto(s.name, t); err != nil {
			var nf *NonFiniteError
			if !errors.As(err, &nf) {
				return nil, err
			}
			if !opts.AllowNonFinite {
				return nil, fmt.Errorf("checkpoint %s: %w: its outputs would be NaN and its decisions meaningless "+
					"(set model.allow_non_finite=true to load it anyway)", dir, err)
			}
			nonFinite = append(nonFinite, nf)
		}
		if !shared {
			// Copy to the device and drop the host copy.
			if err := t.MaterializeOnDevice(backend, false, 0); err != nil {
				return nil, fmt.Errorf("checkpoint %s: tensor %s: %w", dir, s.name, err)
			}
			t.FinalizeLocal()
		}
		m.setWeight(s.name, t)
		if garbage += int64(t.Memory()); garbage > 64<<20 {
			runtime.GC()
			garbage = 0
		}
	}
	if len(nonFinite) > 0 {
		log := opts.Log
		if log == nil {
			log = os.Stderr
		}
		var n int64
		for _, nf := range nonFinite {
			n += nf.Count
		}
		fmt.Fprintf(log, "model: warning: checkpoint %s holds %d non-finite weights in %d tensors (first: %v); "+
			"loaded anyway because model.allow_non_finite is set: its outputs will be NaN\n", dir, n, len(nonFinite), nonFinite[0])
	}
	return m, nil
}

// maxIndexBytes bounds model.safetensors.index.json (Qwen3-235B's is ~2 MB).
const maxIndexBytes = 64 << 20

// openCheckpointFiles opens the safetensors files of dir and maps each
// tensor name to the file that holds it.
func openCheckpointFiles(dir string) (files []*stFile, where map[string]*stFile, err error) {
	where = map[string]*stFile{}
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			files = nil
		}
	}()
	add := func(f *stFile) error {
		files = append(files, f)
		for name := range f.entries {
			if other, dup := where[name]; dup {
				return fmt.Errorf("checkpoint %s: tensor %s is in both %s and %s", dir, name, other.path, f.path)
			}
			where[name] = f
		}
		return nil
	}
	indexPath := filepath.Join(dir, "model.safetensors.index.json")
	_, ierr := os.Stat(indexPath)
	switch {
	case ierr == nil:
		data, err := strictjson.ReadFile(indexPath, maxIndexBytes)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint index: %w", err)
		}
		var idx stIndex
		if err := json.Unmarshal(data, &idx); err != nil {
			return nil, nil, fmt.Errorf("checkpoint index %s: %w", indexPath, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, nil, fmt.Errorf("checkpoint index %s: empty weight_map", indexPath)
		}
		byFile := map[string]*stFile{}
		for _, name := range sortedKeys(idx.WeightMap) {
			file := idx.WeightMap[name]
			if file != filepath.Base(file) {
				return nil, nil, fmt.Errorf("checkpoint index %s: tensor %s: shard %q must be a file name in the checkpoint directory", indexPath, name, file)
			}
			if _, ok := byFile[file]; !ok {
				f, err := openSafetensors(filepath.Join(dir, file))
				if err != nil {
					return nil, nil, err
				}
				byFile[file] = f
				if err := add(f); err != nil {
					return nil, nil, err
				}
			}
			if _, ok := byFile[file].entries[name]; !ok {
				return nil, nil, fmt.Errorf("checkpoint index %s: tensor %s is mapped to %s, which does not hold it", indexPath, name, file)
			}
		}
		for name, f := range where {
			if _, listed := idx.WeightMap[name]; !listed {
				return nil, nil, fmt.Errorf("checkpoint index %s: tensor %s in %s is not listed in weight_map", indexPath, name, f.path)
			}
		}
	case os.IsNotExist(ierr):
		f, err := openSafetensors(filepath.Join(dir, "model.safetensors"))
		if err != nil {
			return nil, nil, err
		}
		if err := add(f); err != nil {
			return nil, nil, err
		}
	default:
		return nil, nil, fmt.Errorf("checkpoint: %w", ierr)
	}
	return files, where, nil
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// DefaultMaxShardBytes is the shard size above which Save splits the
// weights into several files (transformers' default max_shard_size, 5 GB).
const DefaultMaxShardBytes = 5_000_000_000

// SaveOptions control Save.
type SaveOptions struct {
	DType         string // storage dtype of the weights: "float32", "bfloat16" or "float16"; "" = the model's dtype
	MaxShardBytes int64  // split into model-0000k-of-0000n.safetensors above this size; 0 = DefaultMaxShardBytes, < 0 = never
	TokenizerDir  string // when set, tokenizer files found there (tokenizer.json, tokenizer_config.json, …) are copied in (ReadTokenizerFiles)
	// Tokenizer, when set, is written in instead of TokenizerDir's files:
	// the files ReadTokenizerFiles read when a run began, so a checkpoint
	// saved hours later does not depend on its base model still being there.
	Tokenizer TokenizerFiles
	// Values, when set, gives the value to write for a weight instead of its variable's, by
	// the variable's scope and name (context.Variable.ScopeAndName): a trainer's float32
	// master weights, which the bfloat16 variables are rounded copies of.
	Values map[string]*tensors.Tensor
}

// tokenizerFiles are the files Save copies from SaveOptions.TokenizerDir when present.
var tokenizerFiles = []string{"tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
	"special_tokens_map.json", "added_tokens.json", "chat_template.jinja"}

// TokenizerFiles are a tokenizer's files by name, as Save writes them
// (tokenizer.json plain, never gzip-compressed).
type TokenizerFiles map[string][]byte

// ReadTokenizerFiles reads the tokenizer files of dir that Save copies
// (tokenizer.json, or tokenizer.json.gz uncompressed, and the others that
// are present); dir must hold a tokenizer.json.
func ReadTokenizerFiles(dir string) (TokenizerFiles, error) {
	files := TokenizerFiles{}
	for _, name := range tokenizerFiles {
		src := filepath.Join(dir, name)
		data, err := os.ReadFile(src)
		if os.IsNotExist(err) {
			if data, err = readGzip(src + ".gz"); os.IsNotExist(err) {
				continue
			}
		}
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
		files[name] = data
	}
	if files["tokenizer.json"] == nil {
		return nil, fmt.Errorf("tokenizer: %s has no tokenizer.json or tokenizer.json.gz", dir)
	}
	return files, nil
}

// readGzip returns the uncompressed contents of the gzip file path.
func readGzip(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// Save writes the model as a Hugging Face checkpoint directory: config.json,
// generation_config.json, model.safetensors (or shards and
// model.safetensors.index.json), and the tokenizer files. Every file is
// written to a temporary name and renamed; when dir does not exist yet the
// whole directory is built under a temporary name and renamed at the end, so
// a crash never leaves a half-written checkpoint. Stale weight files of an
// earlier save into dir are removed.
func (m *Model) Save(dir string, opts SaveOptions) error {
	stDType, torchDType := stF32, "float32"
	switch strings.ToLower(opts.DType) {
	case "":
		if m.dtype == dtypes.BFloat16 {
			stDType, torchDType = stBF16, "bfloat16"
		}
	case "float32", "f32":
	case "bfloat16", "bf16":
		stDType, torchDType = stBF16, "bfloat16"
	case "float16", "f16":
		stDType, torchDType = stF16, "float16"
	default:
		return fmt.Errorf("save %s: dtype must be float32, bfloat16 or float16, got %q", dir, opts.DType)
	}
	tokFiles := opts.Tokenizer
	if tokFiles == nil && opts.TokenizerDir != "" {
		var err error
		if tokFiles, err = ReadTokenizerFiles(opts.TokenizerDir); err != nil {
			return fmt.Errorf("save %s: %w", dir, err)
		}
	}
	if tokFiles != nil && tokFiles["tokenizer.json"] == nil {
		return fmt.Errorf("save %s: tokenizer: the files given have no tokenizer.json", dir)
	}
	maxShard := opts.MaxShardBytes
	if maxShard == 0 {
		maxShard = DefaultMaxShardBytes
	}

	final := dir
	_, statErr := os.Stat(dir)
	fresh := os.IsNotExist(statErr)
	if fresh {
		if err := os.MkdirAll(filepath.Dir(filepath.Clean(dir)), 0o755); err != nil {
			return fmt.Errorf("save %s: %w", dir, err)
		}
		tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dir)), "."+filepath.Base(dir)+".tmp-*")
		if err != nil {
			return fmt.Errorf("save %s: %w", dir, err)
		}
		defer os.RemoveAll(tmp)                      // a no-op after the final rename
		if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp makes it 0700
			return fmt.Errorf("save %s: %w", dir, err)
		}
		dir = tmp
	} else if statErr != nil {
		return fmt.Errorf("save %s: %w", dir, statErr)
	}

	var ts []stTensor
	var total int64
	for _, s := range tensorSpecs(&m.cfg) {
		t, err := m.weightTensor(s.name)
		if err != nil {
			return fmt.Errorf("save %s: %w", final, err)
		}
		if v := m.ctx.GetVariableByScopeAndName(varPath(s.name)); v != nil && opts.Values[v.ScopeAndName()] != nil {
			t = opts.Values[v.ScopeAndName()]
			if !equalInts(t.Shape().Dimensions, s.shape) {
				return fmt.Errorf("save %s: the value given for %s has shape %v, want %v", final, s.name, t.Shape().Dimensions, s.shape)
			}
		}
		st := stTensor{name: s.name, dtype: stDType, shape: s.shape, src: t}
		ts = append(ts, st)
		total += st.nbytes()
	}
	shards := planShards(ts, maxShard)
	written := map[string]bool{}
	meta := map[string]string{"format": "pt"}
	if len(shards) == 1 {
		if err := writeSafetensors(filepath.Join(dir, "model.safetensors"), shards[0], meta); err != nil {
			return err
		}
		written["model.safetensors"] = true
	} else {
		idx := stIndex{Metadata: map[string]any{"total_size": total}, WeightMap: map[string]string{}}
		for i, shard := range shards {
			name := shardFileName(i, len(shards))
			if err := writeSafetensors(filepath.Join(dir, name), shard, meta); err != nil {
				return err
			}
			written[name] = true
			for _, t := range shard {
				idx.WeightMap[t.name] = name
			}
		}
		data, err := json.MarshalIndent(idx, "", "  ")
		if err != nil {
			return fmt.Errorf("save %s: index: %w", final, err)
		}
		if err := atomicfile.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), data); err != nil {
			return err
		}
		written["model.safetensors.index.json"] = true
	}
	cfgJSON, err := m.cfg.hfConfigJSON(torchDType)
	if err != nil {
		return fmt.Errorf("save %s: %w", final, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "config.json"), cfgJSON); err != nil {
		return err
	}
	genJSON, err := m.cfg.generationConfigJSON()
	if err != nil {
		return fmt.Errorf("save %s: %w", final, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "generation_config.json"), genJSON); err != nil {
		return err
	}
	for _, name := range tokenizerFiles {
		if data, ok := tokFiles[name]; ok {
			if err := atomicfile.WriteFile(filepath.Join(dir, name), data); err != nil {
				return fmt.Errorf("save %s: %w", final, err)
			}
		}
	}
	// Remove weight files of an earlier save that this one did not write.
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("save %s: %w", final, err)
	}
	for _, e := range entries {
		n := e.Name()
		isWeights := strings.HasSuffix(n, ".safetensors") && strings.HasPrefix(n, "model")
		if (isWeights || n == "model.safetensors.index.json") && !written[n] {
			if err := os.Remove(filepath.Join(dir, n)); err != nil {
				return fmt.Errorf("save %s: removing stale %s: %w", final, n, err)
			}
		}
	}
	if fresh {
		if err := atomicfile.ReplaceDir(dir, final); err != nil {
			return fmt.Errorf("save %s: %w", final, err)
		}
	}
	return nil
}

// NumParameters counts the model's weights.
func (m *Model) NumParameters() int64 { return m.cfg.NumParameters() }
