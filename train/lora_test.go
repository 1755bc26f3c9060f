package train

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/safetensors"
	"github.com/mageguard/mageguard/train/teacher"
)

// loraOptions is microOptions training a rank-4 LoRA adapter on a base checkpoint written
// into dir/base (the micro model's random weights, in dtype).
func loraOptions(t *testing.T, dir, dtype string) Options {
	t.Helper()
	o := microOptions(t, filepath.Join(dir, "out"))
	o.Model.DType = dtype
	if dtype == "bfloat16" {
		// bfloat16 products are slow on the pure-Go backend: the synth tokenizer's small
		// vocabulary keeps the LM head small (as testResume does).
		o.Model.Tokenizer, o.Model.VocabSize = "../assets/synth-tokenizer", 1645
		o.Model.BOSTokenID, o.Model.EOSTokenIDs = 1619, []int{1621}
		o.Rollout.PromptVersion = "synth"
	}
	m, _, err := o.Model.Open()
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(dir, "base")
	if err := m.Save(base, model.SaveOptions{TokenizerDir: o.Model.TokenizerDir()}); err != nil {
		t.Fatal(err)
	}
	o.Model.Path = base
	o.Model.LoRA = model.LoRAConfig{Rank: 4, Alpha: 8, Targets: model.DefaultLoRAConfig().Targets}
	return o
}

// dirHashes returns the SHA-256 of every file of dir, by name.
func dirHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fmt.Sprintf("%x", sha256.Sum256(data))
	}
	return out
}

// adapterWeights reads a checkpoint's adapter_model.safetensors as float32, by tensor name.
func adapterWeights(t *testing.T, dir string) map[string][]float32 {
	t.Helper()
	f, err := safetensors.Open(filepath.Join(dir, "adapter_model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]float32{}
	for _, name := range f.Names() {
		e, _ := f.Entry(name)
		dst := tensors.FromShape(shapes.Make(dtypes.Float32, e.Shape...))
		if err := f.ReadInto(name, dst); err != nil {
			t.Fatal(err)
		}
		out[name] = tensors.MustCopyFlatData[float32](dst)
	}
	return out
}

// TestLoRAResumeEqualsUninterrupted: GRPO with a LoRA adapter (β > 0: the reference is the base
// through the adapter switched off; μ = 2) writes adapter checkpoints (PEFT's files on the
// base's absolute path, no weights of the base); a run interrupted after step 2 and resumed
// to step 3 ends with the same adapter and the same metrics as 3 steps straight, in float32
// and in bfloat16 (float32 masters); B has left zero; the base's files are bit-identical
// before and after training.
func TestLoRAResumeEqualsUninterrupted(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	for _, dtype := range []string{"float32", "bfloat16"} {
		t.Run(dtype, func(t *testing.T) {
			dir := t.TempDir()
			straight := loraOptions(t, dir, dtype)
			straight.Train.Steps, straight.Train.Trajectories = 3, 1
			straight.GRPO.Beta, straight.GRPO.NumIterations = 0.04, 2
			baseBefore := dirHashes(t, straight.Model.Path)
			if _, err := Run(context.Background(), straight); err != nil {
				t.Fatal(err)
			}

			o := straight
			o.Out = filepath.Join(dir, "resumed")
			ctx, cancel := context.WithCancel(context.Background())
			o.Progress = &cancelAfter{n: "step 2/3", cancel: cancel}
			if res, err := Run(ctx, o); err != nil || !res.Stopped || res.Steps != 2 {
				t.Fatalf("interrupted run: %+v, %v", res, err)
			}
			o.Progress, o.Resume = nil, true
			if res, err := Run(context.Background(), o); err != nil || res.Steps != 3 {
				t.Fatalf("resumed run: %+v, %v", res, err)
			}

			ckpt := filepath.Join(straight.Out, "checkpoint-3")
			for _, name := range []string{"adapter_config.json", "adapter_model.safetensors", "optimizer.safetensors", "trainer_state.json", "tokenizer.json"} {
				if _, err := os.Stat(filepath.Join(ckpt, name)); err != nil {
					t.Errorf("checkpoint-3: %v", err)
				}
			}
			if _, err := os.Stat(filepath.Join(ckpt, "model.safetensors")); err == nil {
				t.Error("checkpoint-3 holds a whole model")
			}
			var cfg struct {
				Base string `json:"base_model_name_or_path"`
				R    int    `json:"r"`
			}
			data, _ := os.ReadFile(filepath.Join(ckpt, "adapter_config.json"))
			if err := json.Unmarshal(data, &cfg); err != nil || cfg.R != 4 || !filepath.IsAbs(cfg.Base) || filepath.Base(cfg.Base) != "base" {
				t.Errorf("adapter_config.json %s: %v", data, err)
			}

			a, b := adapterWeights(t, ckpt), adapterWeights(t, filepath.Join(o.Out, "checkpoint-3"))
			moved := false
			for name, x := range a {
				for i := range x {
					if x[i] != b[name][i] {
						t.Fatalf("%s[%d]: straight %v, resumed %v", name, i, x[i], b[name][i])
					}
					moved = moved || (strings.Contains(name, "lora_B") && x[i] != 0)
				}
			}
			if len(a) != 2*7 || !moved {
				t.Errorf("%d adapter tensors, B moved %v", len(a), moved)
			}
			clean := func(ms []Metrics) string {
				for i := range ms {
					ms[i].TokensPerSecond, ms[i].RolloutSeconds, ms[i].UpdateSeconds, ms[i].Seconds, ms[i].Elapsed = 0, 0, 0, 0, 0
				}
				j, _ := json.Marshal(ms)
				return string(j)
			}
			ma := readJSONL[Metrics](t, filepath.Join(straight.Out, "metrics.jsonl"))
			mb := readJSONL[Metrics](t, filepath.Join(o.Out, "metrics.jsonl"))
			if len(ma) != 3 || clean(ma) != clean(mb) {
				t.Fatalf("metrics differ:\nstraight %s\nresumed  %s", clean(ma), clean(mb))
			}
			if !(ma[2].KL > 0) {
				t.Fatalf("step 3 KL %v: the test cannot tell the reference apart from the model", ma[2].KL)
			}
			if after := dirHashes(t, straight.Model.Path); fmt.Sprint(after) != fmt.Sprint(baseBefore) {
				t.Errorf("the base's files changed:\nbefore %v\nafter  %v", baseBefore, after)
			}
		})
	}
}

// TestLoRASFT: SFT with a LoRA adapter on a saved base starts from the base exactly — its first
// step's cross-entropy is full SFT's from the same base (the same model, the same calls) — and
// writes an adapter checkpoint whose B has left zero, the base's files untouched.
func TestLoRASFT(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	o := synthMicroOptions(t)
	o.Train.Steps = 2
	m, _, err := o.Model.Open()
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(t.TempDir(), "base")
	if err := m.Save(base, model.SaveOptions{TokenizerDir: o.Model.TokenizerDir()}); err != nil {
		t.Fatal(err)
	}
	o.Model.Path = base
	before := dirHashes(t, base)
	losses := map[bool][]float64{}
	for _, lora := range []bool{false, true} {
		r := o
		r.Out = filepath.Join(t.TempDir(), "out")
		if lora {
			r.Model.LoRA = model.LoRAConfig{Rank: 4, Alpha: 8, Targets: model.DefaultLoRAConfig().Targets}
		}
		if _, err := SFT(context.Background(), r, DefaultSFTConfig(), teacher.Synth{BudgetChars: 100}); err != nil {
			t.Fatal(err)
		}
		for _, m := range readJSONL[SFTMetrics](t, filepath.Join(r.Out, "metrics.jsonl")) {
			losses[lora] = append(losses[lora], m.Loss)
		}
		if lora {
			moved := false
			for name, x := range adapterWeights(t, filepath.Join(r.Out, "checkpoint-2")) {
				for _, v := range x {
					moved = moved || (strings.Contains(name, "lora_B") && v != 0)
				}
			}
			if !moved {
				t.Error("the SFT adapter's B did not leave zero")
			}
		}
	}
	full, lora := losses[false], losses[true]
	if len(full) != 2 || len(lora) != 2 || math.Abs(full[0]-lora[0]) > 1e-6*full[0] || full[1] == lora[1] {
		t.Errorf("cross-entropy full %v, LoRA %v: want the same first step, then apart", full, lora)
	}
	if after := dirHashes(t, base); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Error("the base's files changed")
	}
}
