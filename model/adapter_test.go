package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/model/checkpoint"
	"github.com/mageguard/mageguard/model/safetensors"
)

// adapterOnDisk saves a random base (testConfig) into dir/base and returns the base with a
// rank-4 adapter on every target whose B has moved off zero.
func adapterOnDisk(t *testing.T, dir string) *Model {
	t.Helper()
	m := newTestModel(t, testConfig(), 3)
	if err := m.Save(filepath.Join(dir, "base"), SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.AddAdapter(loraConfig(4), 7, filepath.Join(dir, "base")); err != nil {
		t.Fatal(err)
	}
	randomizeB(t, m, 5, 0.05)
	return m
}

// TestAdapterCheckpointPEFTLayout: SaveAdapter writes PEFT's adapter_config.json and
// adapter_model.safetensors with PEFT's tensor names and shapes for every target of every
// layer (the shapes from the architecture, written out here); the directory loads back onto
// its base with the same logits, bit for bit, also with base_model_name_or_path relative to
// the adapter directory; Save refuses a model with an adapter.
func TestAdapterCheckpointPEFTLayout(t *testing.T) {
	dir := t.TempDir()
	m := adapterOnDisk(t, dir)
	want := logitsThrough(t, m, m.Context(), loraIDs)
	adir := filepath.Join(dir, "adapter")
	if err := m.SaveAdapter(adir, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(filepath.Join(dir, "whole"), SaveOptions{}); err == nil || !strings.Contains(err.Error(), "LoRA adapter") {
		t.Errorf("Save of a model with an adapter: %v", err)
	}
	if got := dirFiles(t, adir); !slices.Equal(got, []string{"adapter_config.json", "adapter_model.safetensors"}) {
		t.Errorf("files %v", got)
	}

	data, err := os.ReadFile(filepath.Join(adir, "adapter_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	base, _ := filepath.Abs(filepath.Join(dir, "base"))
	for key, value := range map[string]any{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4.0, "lora_alpha": 16.0,
		"bias": "none", "use_rslora": false, "base_model_name_or_path": base} {
		if cfg[key] != value {
			t.Errorf("adapter_config.json %s = %v, want %v", key, cfg[key], value)
		}
	}
	if got := fmt.Sprint(cfg["target_modules"]); got != "[q_proj k_proj v_proj o_proj gate_proj up_proj down_proj]" {
		t.Errorf("target_modules %s", got)
	}

	// testConfig: hidden 32, 4 query heads and 2 KV heads of 8, MLP 64, 2 layers.
	shapes := map[string][2]int{ // [out, in]
		"self_attn.q_proj": {32, 32}, "self_attn.k_proj": {16, 32}, "self_attn.v_proj": {16, 32}, "self_attn.o_proj": {32, 32},
		"mlp.gate_proj": {64, 32}, "mlp.up_proj": {64, 32}, "mlp.down_proj": {32, 64},
	}
	f, err := safetensors.Open(filepath.Join(adir, "adapter_model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	for layer := range 2 {
		for module, oi := range shapes {
			p := fmt.Sprintf("base_model.model.model.layers.%d.%s.", layer, module)
			for name, shape := range map[string][]int{p + "lora_A.weight": {4, oi[1]}, p + "lora_B.weight": {oi[0], 4}} {
				names = append(names, name)
				e, ok := f.Entry(name)
				if !ok || !slices.Equal(e.Shape, shape) || e.DType != safetensors.F32 {
					t.Errorf("%s: %+v (present %v), want F32 %v", name, e, ok, shape)
				}
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(f.Names(), names) {
		t.Errorf("tensors %v, want %v", f.Names(), names)
	}

	for _, rel := range []bool{false, true} {
		if rel {
			cfg["base_model_name_or_path"] = "../base"
			data, _ := json.Marshal(cfg)
			os.WriteFile(filepath.Join(adir, "adapter_config.json"), data, 0o644)
		}
		back, err := Load(testBackend(t), adir)
		if err != nil {
			t.Fatal(err)
		}
		if a := back.Adapter(); a == nil || !a.sameAdapter(m.Adapter()) || back.AdapterBase() != base {
			t.Fatalf("relative %v: loaded adapter %+v on %s", rel, a, back.AdapterBase())
		}
		if got := logitsThrough(t, back, back.Context(), loraIDs); !equalBits(got, want) {
			t.Errorf("relative %v: the loaded adapter's logits differ", rel)
		}
	}
}

// TestAdapterBaseRefused: an adapter whose base is missing, of another architecture (found
// from its config.json, before any weight is read), or an adapter itself is refused with an
// error naming the adapter and the base.
func TestAdapterBaseRefused(t *testing.T) {
	dir := t.TempDir()
	m := adapterOnDisk(t, dir)
	adir := filepath.Join(dir, "adapter")
	if err := m.SaveAdapter(adir, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	setBase := func(base string) {
		data, _ := os.ReadFile(filepath.Join(adir, "adapter_config.json"))
		var cfg map[string]any
		json.Unmarshal(data, &cfg)
		cfg["base_model_name_or_path"] = base
		data, _ = json.Marshal(cfg)
		os.WriteFile(filepath.Join(adir, "adapter_config.json"), data, 0o644)
	}
	other := testConfig()
	other.HiddenSize = 48
	wide := newTestModel(t, other, 3)
	if err := wide.Save(filepath.Join(dir, "wide"), SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	deep := testConfig()
	deep.NumHiddenLayers = 3
	if err := newTestModel(t, deep, 3).Save(filepath.Join(dir, "deep"), SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	shallow := testConfig()
	shallow.NumHiddenLayers = 1
	if err := newTestModel(t, shallow, 3).Save(filepath.Join(dir, "shallow"), SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	// A base of another architecture is refused from its config.json, before its weights are
	// read: this one has none.
	if err := newTestModel(t, other, 3).Save(filepath.Join(dir, "wide-config-only"), SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "wide-config-only", "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		base string
		want string
	}{
		{filepath.Join(dir, "missing"), "cannot be read"},
		{"Qwen/Qwen3-4B", "a Hugging Face hub name"}, // PEFT writes the hub name it loaded
		{filepath.Join(dir, "wide"), "another architecture"},
		{filepath.Join(dir, "wide-config-only"), "another architecture"},
		{filepath.Join(dir, "deep"), "another architecture"},
		{filepath.Join(dir, "shallow"), "another architecture"},
		{adir, "is an adapter too"},
	} {
		setBase(c.base)
		_, err := Load(testBackend(t), adir)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), adir) || !strings.Contains(err.Error(), c.base) {
			t.Errorf("base %s: error %v, want one naming %s and %s and saying %q", c.base, err, adir, c.base, c.want)
		}
	}
}

// TestReadAdapterConfig: adapter_config.json as PEFT writes it loads (extra keys at their
// defaults, target_modules "all-linear", an initialisation that leaves the base as it is);
// what cannot be applied is refused naming the key.
func TestReadAdapterConfig(t *testing.T) {
	peft := `{"alpha_pattern": {}, "auto_mapping": null, "base_model_name_or_path": "/models/Qwen3-4B", "bias": "none",
"fan_in_fan_out": false, "inference_mode": true, "init_lora_weights": true, "layers_pattern": null,
"layers_to_transform": null, "lora_alpha": 32, "lora_dropout": 0.05, "modules_to_save": null, "peft_type": "LORA",
"r": 16, "rank_pattern": {}, "revision": null, "target_modules": %s, "task_type": "CAUSAL_LM", "use_dora": false, "use_rslora": %s}`
	for _, c := range []struct {
		targets, rslora, edit, want string
	}{
		{`["q_proj", "v_proj"]`, "false", "", ""},
		{`"all-linear"`, "true", "", ""},
		{`".*proj"`, "false", "", "regular expression"},
		{`["q_proj"]`, "false", `"use_dora": false` + "|" + `"use_dora": true`, "use_dora"},
		{`["q_proj"]`, "false", `"rank_pattern": {}` + "|" + `"rank_pattern": {"q_proj": 8}`, "rank_pattern"},
		{`["q_proj"]`, "false", `"bias": "none"` + "|" + `"bias": "all"`, "bias"},
		{`["q_proj"]`, "false", `"r": 16` + "|" + `"r": 16, "r": 8`, "given twice"},
		{`["q_proj"]`, "false", `"init_lora_weights": true` + "|" + `"init_lora_weights": "gaussian"`, ""},
		{`["q_proj"]`, "false", `"init_lora_weights": true` + "|" + `"init_lora_weights": false`, ""},
		{`["q_proj"]`, "false", `"init_lora_weights": true` + "|" + `"init_lora_weights": "pissa"`, "init_lora_weights"},
		{`["q_proj"]`, "false", `"init_lora_weights": true` + "|" + `"init_lora_weights": 3`, "init_lora_weights"},
		{`["q_proj"]`, "false", `"use_dora": false` + "|" + `"use_dora": false, "lora_bias": false`, ""},
		{`["q_proj"]`, "false", `"use_dora": false` + "|" + `"use_dora": false, "lora_bias": true`, "lora_bias"},
		{`["q_proj"]`, "false", `"use_dora": false` + "|" + `"use_dora": false, "exclude_modules": ["v_proj"]`, "exclude_modules"},
	} {
		text := fmt.Sprintf(peft, c.targets, c.rslora)
		if c.edit != "" {
			from, to, _ := strings.Cut(c.edit, "|")
			text = strings.Replace(text, from, to, 1)
		}
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(text), 0o644)
		cfg, err := checkpoint.ReadAdapterConfig(dir)
		if c.want != "" {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %s: error %v, want %q", c.targets, c.edit, err, c.want)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		wantScale := 2.0
		if c.rslora == "true" {
			wantScale = 8 // 32/√16
		}
		if cfg.R != 16 || cfg.Scale() != wantScale || len(cfg.TargetModules) == 0 || cfg.BaseDir(dir) != "/models/Qwen3-4B" {
			t.Errorf("%s: %+v, scale %v", c.targets, cfg, cfg.Scale())
		}
	}
}

// TestInspectAdapter: Inspect of an adapter directory describes its base (parameters, files)
// and the adapter: rank 4 on every projection of testConfig's 2 layers is
// 2 × 4 × ((32+32) + 2·(32+16) + (32+32) + 2·(32+64) + (64+32)) = 4,096 parameters, scale 16/4.
func TestInspectAdapter(t *testing.T) {
	dir := t.TempDir()
	m := adapterOnDisk(t, dir)
	adir := filepath.Join(dir, "adapter")
	if err := m.SaveAdapter(adir, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err := Inspect(adir)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := filepath.Abs(filepath.Join(dir, "base"))
	a := info.Adapter
	if a == nil || a.Base != base || a.LoRA.Rank != 4 || a.Scale != 4 || a.Parameters != 4096 || info.Parameters != m.NumParameters() {
		t.Fatalf("%+v, adapter %+v", info, a)
	}
}

// TestAdapterTokenizerWithinItsBase: the tokenizer of an adapter directory is bounded by its
// base's vocab_size before it is built, as a whole checkpoint's is by its own: Qwen3's tokenizer
// (151,669 ids) beside an adapter on testConfig's 256-id base is refused naming the base's
// config.json.
func TestAdapterTokenizerWithinItsBase(t *testing.T) {
	dir := t.TempDir()
	m := adapterOnDisk(t, dir)
	adir := filepath.Join(dir, "adapter")
	if err := m.SaveAdapter(adir, SaveOptions{TokenizerDir: "../assets/qwen3"}); err != nil {
		t.Fatal(err)
	}
	s := DefaultSettings()
	s.Path = adir
	base, _ := filepath.Abs(filepath.Join(dir, "base"))
	_, _, err := s.LoadTokenizer()
	if err == nil || !strings.Contains(err.Error(), "vocab_size of "+filepath.Join(base, "config.json")) {
		t.Fatalf("error %v, want one naming the vocab_size of %s/config.json", err, base)
	}
}

// TestPrepareAdapter: model.lora against what --model loaded. Rank 0 trains what was loaded (a
// whole model's weights, or an adapter checkpoint's adapter, continued); a rank on a whole
// checkpoint adds a new adapter on it (B zero, its base the checkpoint's absolute path); a rank
// on an adapter checkpoint must describe that adapter (targets in any order); a random model
// (no model.path) cannot be a base.
func TestPrepareAdapter(t *testing.T) {
	dir := t.TempDir()
	m := adapterOnDisk(t, dir)
	adir := filepath.Join(dir, "adapter")
	if err := m.SaveAdapter(adir, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	base, _ := filepath.Abs(filepath.Join(dir, "base"))
	reversed := slices.Clone(loraConfig(4).Targets)
	slices.Reverse(reversed)
	for _, c := range []struct {
		name, path string
		lora       LoRAConfig
		wantRank   int // the adapter after PrepareAdapter; 0 = none
		wantErr    string
	}{
		{"whole model, rank 0", filepath.Join(dir, "base"), LoRAConfig{}, 0, ""},
		{"adapter, rank 0: continued", adir, LoRAConfig{}, 4, ""},
		{"adapter, the same model.lora", adir, LoRAConfig{Rank: 4, Alpha: 16, Targets: reversed}, 4, ""},
		{"adapter, another rank", adir, loraConfig(8), 0, "differs from the adapter of " + adir},
		{"adapter, another alpha", adir, LoRAConfig{Rank: 4, Alpha: 32, Targets: reversed}, 0, "differs from the adapter"},
		{"whole model, rank 8: a new adapter", filepath.Join(dir, "base"), loraConfig(8), 8, ""},
		{"random model, rank 8", "", loraConfig(8), 0, "needs a base checkpoint"},
	} {
		s := DefaultSettings()
		s.Path, s.LoRA, s.Config = c.path, c.lora, *testConfig() // a checkpoint's config.json wins
		m, err := s.LoadModel(testBackend(t), nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		err = s.PrepareAdapter(m)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: error %v, want %q", c.name, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		a := m.Adapter()
		switch {
		case c.wantRank == 0 && a != nil:
			t.Errorf("%s: an adapter %s", c.name, a)
		case c.wantRank == 0:
		case a == nil || a.Rank != c.wantRank || m.AdapterBase() != base:
			t.Errorf("%s: adapter %v on %q, want rank %d on %s", c.name, a, m.AdapterBase(), c.wantRank, base)
		case c.path == adir:
			_, b, err := m.adapterValues("model.layers.0.self_attn.q_proj")
			if err != nil || allZeroF32(b) {
				t.Errorf("%s: the checkpoint's B was not loaded (%v)", c.name, err)
			}
		default:
			_, b, err := m.adapterValues("model.layers.0.self_attn.q_proj")
			if err != nil || !allZeroF32(b) {
				t.Errorf("%s: a new adapter's B is not zero (%v)", c.name, err)
			}
		}
	}
}

func allZeroF32(a []float32) bool {
	for _, x := range a {
		if x != 0 {
			return false
		}
	}
	return true
}
