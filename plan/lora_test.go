package plan_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/plan"
)

// TestLoRAPlanOn4B: configs/default.yaml (Qwen3-4B, bfloat16, float32 masters, β 0.04, XLA)
// with a rank-16 adapter on all seven projections trains 36 × 16 × (2·(2560+4096) +
// 2·(2560+1024) + 3·(2560+9728)) = 33,030,144 parameters: the resident state is the bfloat16
// base (8.04 GB) and that adapter's weights, masters, accumulators and moments, with no
// reference copy; generation's phases are full fine-tuning's, and the total is the resident
// state plus the decoding step (the peak). It fits 24, 48, 80 and 141 GB with the file's
// batch sizes (full fine-tuning fits only 141 GB), the largest batch sizes growing with the
// device; the log holds the figures of docs/real-use.md:
//
//	go test -count=1 -run TestLoRAPlanOn4B -v ./plan
func TestLoRAPlanOn4B(t *testing.T) {
	const params, adapter = 4022468096, 36 * 16 * (2*(2560+4096) + 2*(2560+1024) + 3*(2560+9728))
	if adapter != 33030144 {
		t.Fatal(adapter)
	}
	prevMicro, prevRollout := 0, 0
	for _, gb := range []int64{24, 48, 80, 141} {
		full, err := plan.Compute(defaultInputs(t, gb*1e9))
		if err != nil {
			t.Fatal(err)
		}
		in := defaultInputs(t, gb*1e9, "model.lora.rank=16")
		if in.LoRA.Rank != 16 || len(in.LoRA.Targets) != 7 {
			t.Fatalf("inputs %+v", in.LoRA)
		}
		p, err := plan.Compute(in)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{"weights": 2 * params, "adapter_weights": 2 * adapter, "master_weights": 4 * adapter,
			"gradient_accumulators": 4 * adapter, "adam_moments": 8 * adapter, "reference": 0,
			// the memory and judge system prompts kept prefilled, 512 slots each:
			// 2 (k, v) × 36 layers × 512 × 8 KV heads × 128 × 2 bytes
			"kept_prefixes": 2 * 2 * 36 * 512 * 8 * 128 * 2}
		var resident int64
		for _, q := range p.Resident {
			if q.Bytes != want[q.Name] {
				t.Errorf("%d GB: resident %s = %d, want %d", gb, q.Name, q.Bytes, want[q.Name])
			}
			resident += q.Bytes
			delete(want, q.Name)
		}
		if len(want) > 0 {
			t.Errorf("resident parts missing: %v", want)
		}
		for _, name := range []string{"prefill", "decode"} {
			if p.Phase(name).Bytes != full.Phase(name).Bytes {
				t.Errorf("%s: %d bytes, full fine-tuning's %d", name, p.Phase(name).Bytes, full.Phase(name).Bytes)
			}
		}
		if p.Peak != "decode" || p.Total != resident+p.Phase("decode").Bytes {
			t.Errorf("%d GB: peak %s, total %d", gb, p.Peak, p.Total)
		}
		if g := p.Phase("gradients"); g.Bytes != 4*adapter {
			t.Errorf("gradients phase %d, want the adapter's new float32 accumulators %d", g.Bytes, 4*adapter)
		}
		fits, _ := p.Fits()
		fullFits, _ := full.Fits()
		if !fits || fullFits != (gb == 141) || p.MaxMicroBatch < 8 || p.MaxRolloutBatch < 16 ||
			p.MaxMicroBatch <= prevMicro || p.MaxRolloutBatch <= prevRollout {
			t.Errorf("%d GB: LoRA %s; full fine-tuning %s", gb, p.Summary(), full.Summary())
		}
		prevMicro, prevRollout = p.MaxMicroBatch, p.MaxRolloutBatch
		t.Logf("LoRA rank 16, %d GB: %s", gb, p.Summary())
		t.Logf("full fine-tuning, %d GB: %s", gb, full.Summary())
	}
	for _, r := range []string{"8", "32", "64"} {
		p, err := plan.Compute(defaultInputs(t, 24e9, "model.lora.rank="+r))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("LoRA rank %s, 24 GB: %s", r, p.Summary())
	}
	var b strings.Builder
	p, _ := plan.Compute(defaultInputs(t, 24e9, "model.lora.rank=16"))
	p.WriteText(&b)
	t.Logf("configs/default.yaml with model.lora.rank=16 on 24 GB:\n%s", b.String())
}

// TestLoRAPlanOfAdapterCheckpoint: an adapter directory as model.path plans its base's
// architecture (config.json, no weights needed) with its rank and targets.
func TestLoRAPlanOfAdapterCheckpoint(t *testing.T) {
	dir := t.TempDir()
	base, adapter := filepath.Join(dir, "base"), filepath.Join(dir, "adapter")
	os.MkdirAll(base, 0o755)
	os.MkdirAll(adapter, 0o755)
	os.WriteFile(filepath.Join(base, "config.json"), []byte(`{"model_type": "qwen3", "vocab_size": 1000, "hidden_size": 64,
"intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
"tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2}`), 0o644)
	cfg, _ := json.Marshal(map[string]any{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8,
		"target_modules": []string{"q_proj", "v_proj"}, "bias": "none", "use_rslora": false, "base_model_name_or_path": "../base"})
	os.WriteFile(filepath.Join(adapter, "adapter_config.json"), cfg, 0o644)
	in := defaultInputs(t, 0, "model.path="+adapter)
	// 3 layers × 4 × ((64 + 4·16) + (64 + 2·16)).
	if got := in.Arch.HiddenSize; got != 64 || in.LoRA.Rank != 4 || strings.Join(in.LoRA.Targets, ",") != "q_proj,v_proj" {
		t.Fatalf("hidden %d, LoRA %+v", got, in.LoRA)
	}
	p, err := plan.Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range p.Resident {
		if q.Name == "adam_moments" && q.Bytes != 8*3*4*((64+64)+(64+32)) {
			t.Errorf("adam_moments %d", q.Bytes)
		}
	}
}
