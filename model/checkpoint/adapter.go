package checkpoint

// PEFT LoRA adapter directories: adapter_config.json and
// adapter_model.safetensors beside the tokenizer files, as PEFT's
// save_pretrained writes them and vLLM's --lora-modules reads them.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/internal/strictjson"
	"github.com/mageguard/mageguard/model/safetensors"
)

// Names of the files of an adapter directory.
const (
	AdapterConfigFile  = "adapter_config.json"       // PEFT's LoraConfig
	AdapterWeightsFile = "adapter_model.safetensors" // the A and B matrices by PEFT's tensor names
)

// maxAdapterConfigBytes bounds adapter_config.json (PEFT writes about 1 KB).
const maxAdapterConfigBytes = 1 << 20

// AdapterConfig is adapter_config.json: the keys of PEFT's LoraConfig that
// say how to apply a LoRA adapter. A layer's adapted module computes
//
//	y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ,   s = lora_alpha / r   (use_rslora: lora_alpha / √r)
//
// with A [r, in] and B [out, r].
type AdapterConfig struct {
	PEFTType      string   `json:"peft_type"`      // "LORA"
	TaskType      string   `json:"task_type"`      // "CAUSAL_LM"
	R             int      `json:"r"`              // the rank
	LoRAAlpha     float64  `json:"lora_alpha"`     // α
	TargetModules []string `json:"target_modules"` // module names (q_proj, …); in the file a list, or "all-linear"
	Bias          string   `json:"bias"`           // "none": no bias is trained
	UseRSLoRA     bool     `json:"use_rslora"`     // s = α/√r instead of α/r
	// BaseModelNameOrPath is the base checkpoint directory: absolute, or
	// relative to the adapter directory (BaseDir resolves it).
	BaseModelNameOrPath string  `json:"base_model_name_or_path"`
	LoRADropout         float64 `json:"lora_dropout"`
	FanInFanOut         bool    `json:"fan_in_fan_out"` // false: A and B in torch.nn.Linear's [out, in] layout
	InferenceMode       bool    `json:"inference_mode"`
	// InitLoRAWeights is written true (A Kaiming-uniform, B zero); read, it is true, false or
	// an initialisation that leaves the base as it is ("gaussian", "eva", "orthogonal": then
	// false here), ReadAdapterConfig refusing those that change the base (PiSSA, OLoRA, …).
	InitLoRAWeights bool  `json:"init_lora_weights"`
	UseDoRA         bool  `json:"use_dora"`
	ModulesToSave   []any `json:"modules_to_save"` // always null here
}

// Scale is s: LoRAAlpha / R, or LoRAAlpha / √R with UseRSLoRA.
func (c *AdapterConfig) Scale() float64 {
	if c.UseRSLoRA {
		return c.LoRAAlpha / math.Sqrt(float64(c.R))
	}
	return c.LoRAAlpha / float64(c.R)
}

// BaseDir returns the base checkpoint directory of the adapter in
// adapterDir: base_model_name_or_path when absolute, else joined to
// adapterDir.
func (c *AdapterConfig) BaseDir(adapterDir string) string {
	if filepath.IsAbs(c.BaseModelNameOrPath) {
		return c.BaseModelNameOrPath
	}
	return filepath.Join(adapterDir, c.BaseModelNameOrPath)
}

// IsAdapter reports whether dir holds an adapter (adapter_config.json)
// rather than a whole model.
func IsAdapter(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, AdapterConfigFile))
	return err == nil
}

// AdapterTensorName is PEFT's name of the A ("A") or B ("B") matrix of a
// module of the base model, e.g. model.layers.0.self_attn.q_proj →
// base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight.
func AdapterTensorName(module, which string) string {
	return "base_model.model." + module + ".lora_" + which + ".weight"
}

// ReadAdapterConfig reads dir/adapter_config.json: a JSON object with no key
// given twice, of a LoRA adapter this package can apply. Keys PEFT writes
// that change nothing here (revision, layers_pattern, …) are read past when
// they hold their defaults; an adapter that needs what is not implemented —
// DoRA, biases, per-module ranks or alphas, modules_to_save, fan_in_fan_out,
// regular-expression targets — is an error naming the key.
func ReadAdapterConfig(dir string) (*AdapterConfig, error) {
	path := filepath.Join(dir, AdapterConfigFile)
	data, err := strictjson.ReadFile(path, maxAdapterConfigBytes)
	if err != nil {
		return nil, fmt.Errorf("adapter: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("adapter %s: %w", path, err)
	}
	c := AdapterConfig{Bias: "none"}
	targets, init := raw["target_modules"], raw["init_lora_weights"]
	delete(raw, "target_modules")
	delete(raw, "init_lora_weights")
	fields, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("adapter %s: %w", path, err)
	}
	if err := json.Unmarshal(fields, &c); err != nil {
		return nil, fmt.Errorf("adapter %s: %w", path, err)
	}
	if c.TargetModules, err = readTargets(targets); err != nil {
		return nil, fmt.Errorf("adapter %s: target_modules: %w", path, err)
	}
	if c.InitLoRAWeights, err = readInit(init); err != nil {
		return nil, fmt.Errorf("adapter %s: init_lora_weights: %w", path, err)
	}
	if err := c.check(raw); err != nil {
		return nil, fmt.Errorf("adapter %s: %w", path, err)
	}
	return &c, nil
}

// AllLinear is what target_modules "all-linear" names in a Qwen3: every
// linear projection of a decoder layer (PEFT leaves the LM head out).
var AllLinear = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// readTargets reads target_modules: a list of module names, or "all-linear".
func readTargets(data json.RawMessage) ([]string, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("missing")
	}
	var s string
	if json.Unmarshal(data, &s) == nil {
		if s == "all-linear" {
			return slices.Clone(AllLinear), nil
		}
		return nil, fmt.Errorf("%q: a regular expression is not supported, give a list of module names or \"all-linear\"", s)
	}
	var list []string
	if err := json.Unmarshal(data, &list); err != nil {
		return nil, fmt.Errorf("want a list of module names: %w", err)
	}
	return list, nil
}

// readInit reads init_lora_weights: true (the default), false, or the name of an
// initialisation. Only the initialisation of A and B differs between true, false, "gaussian",
// "eva" and "orthogonal", so such an adapter applies to the base as it is (a name reads as
// false); the others (PiSSA, OLoRA, CorDA, LoftQ, …) also change the base weights, so the
// adapter fits only the base they made.
func readInit(data json.RawMessage) (bool, error) {
	if len(data) == 0 {
		return true, nil
	}
	var b bool
	if json.Unmarshal(data, &b) == nil {
		return b, nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return false, fmt.Errorf("want true, false or an initialisation's name: %w", err)
	}
	if s == "gaussian" || s == "eva" || s == "orthogonal" {
		return false, nil
	}
	return false, fmt.Errorf("%q: an adapter initialised so changes its base's weights and applies only to the base that initialisation made (PEFT converts such an adapter to one on the original base when saving with path_initial_model_for_weight_conversion)", s)
}

// check refuses what an adapter of this package cannot be.
func (c *AdapterConfig) check(raw map[string]json.RawMessage) error {
	switch {
	case c.PEFTType != "LORA":
		return fmt.Errorf("peft_type %q: only LORA adapters are supported", c.PEFTType)
	case c.R < 1:
		return fmt.Errorf("r must be >= 1, got %d", c.R)
	case !(c.LoRAAlpha > 0):
		return fmt.Errorf("lora_alpha must be > 0, got %v", c.LoRAAlpha)
	case len(c.TargetModules) == 0:
		return fmt.Errorf("target_modules is empty")
	case c.Bias != "none":
		return fmt.Errorf("bias %q: only \"none\" is supported", c.Bias)
	case c.UseDoRA:
		return fmt.Errorf("use_dora: DoRA is not supported")
	case c.FanInFanOut:
		return fmt.Errorf("fan_in_fan_out: only torch.nn.Linear's [out, in] layout is supported")
	case len(c.ModulesToSave) > 0:
		return fmt.Errorf("modules_to_save: fully trained modules are not supported")
	case c.BaseModelNameOrPath == "":
		return fmt.Errorf("base_model_name_or_path is empty: it must name the base checkpoint directory")
	}
	// Keys whose non-default values change the adapter's maths (false, null, {} and [] are
	// their defaults).
	for _, key := range []string{"rank_pattern", "alpha_pattern", "layers_to_transform", "layers_pattern", "target_parameters",
		"exclude_modules", "layer_replication", "lora_bias", "trainable_token_indices", "alora_invocation_tokens", "arrow_config"} {
		v, ok := raw[key]
		if !ok {
			continue
		}
		var x any
		if err := json.Unmarshal(v, &x); err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		switch x := x.(type) {
		case nil:
			continue
		case bool:
			if !x {
				continue
			}
		case map[string]any:
			if len(x) == 0 {
				continue
			}
		case []any:
			if len(x) == 0 {
				continue
			}
		}
		return fmt.Errorf("%s: %s is not supported (every targeted module of every layer gets a plain LoRA of rank r and alpha lora_alpha)", key, v)
	}
	return nil
}

// AdapterContents are what WriteAdapter puts in an adapter directory.
type AdapterContents struct {
	Config    AdapterConfig
	Weights   []safetensors.Tensor // by AdapterTensorName, in the order they are written
	Tokenizer TokenizerFiles       // the tokenizer's files; only the names of TokenizerFileNames are written
}

// WriteAdapter writes c into dir as PEFT does: adapter_config.json,
// adapter_model.safetensors and the tokenizer files. Every file is written
// to a temporary name and renamed; when dir does not exist yet the whole
// directory is built under a temporary name and renamed at the end.
func WriteAdapter(dir string, c AdapterContents) error {
	cfg, err := json.MarshalIndent(c.Config, "", "  ")
	if err != nil {
		return fmt.Errorf("save %s: %w", dir, err)
	}
	return writeDir(dir, func(tmp string) error {
		if err := safetensors.Write(filepath.Join(tmp, AdapterWeightsFile), c.Weights, map[string]string{"format": "pt"}); err != nil {
			return err
		}
		if err := atomicfile.WriteFile(filepath.Join(tmp, AdapterConfigFile), append(cfg, '\n')); err != nil {
			return err
		}
		for _, name := range TokenizerFileNames {
			if data, ok := c.Tokenizer[name]; ok {
				if err := atomicfile.WriteFile(filepath.Join(tmp, name), data); err != nil {
					return fmt.Errorf("save %s: %w", dir, err)
				}
			}
		}
		return nil
	})
}
