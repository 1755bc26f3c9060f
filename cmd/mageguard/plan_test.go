package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// plan --json prints one object whose total is the sum of its parts, with
// the device's memory from --device-memory and a verdict that agrees with
// them; the default config is Qwen3-4B without its weights.
func TestPlanJSON(t *testing.T) {
	out, _, err := runStdin(t, "", "plan", "--config", "../../configs/default.yaml", "--set", "model.tokenizer=../../assets/qwen3",
		"--device-memory", "141GB", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var j struct {
		Fits                *bool            `json:"fits"`
		TotalBytes          int64            `json:"total_bytes"`
		DeviceBytes         int64            `json:"device_bytes"`
		UsableBytes         int64            `json:"usable_bytes"`
		Parts               map[string]int64 `json:"parts"`
		MaxMicroBatchSize   *int             `json:"max_micro_batch_size"`
		MaxRolloutBatchSize *int             `json:"max_rollout_batch_size"`
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var sum int64
	for _, b := range j.Parts {
		sum += b
	}
	if j.Fits == nil || j.MaxMicroBatchSize == nil || j.MaxRolloutBatchSize == nil {
		t.Fatalf("a known device gives a verdict: %s", out)
	}
	if sum != j.TotalBytes || j.DeviceBytes != 141e9 || *j.Fits != (j.TotalBytes <= j.UsableBytes) {
		t.Errorf("total %d, parts %d, device %d, usable %d, fits %v", j.TotalBytes, sum, j.DeviceBytes, j.UsableBytes, *j.Fits)
	}
	// 4,022,468,096 bfloat16 weights.
	if j.Parts["weights"] != 2*4022468096 || j.UsableBytes != int64(0.95*141e9) {
		t.Errorf("weights %d bytes, usable %d: want Qwen3-4B in bfloat16 and 95%% of 141 GB", j.Parts["weights"], j.UsableBytes)
	}
	if _, _, err := runStdin(t, "", "plan", "--config", "../../configs/tiny.yaml", "--device-memory", "lots"); err == nil ||
		!strings.Contains(err.Error(), "--device-memory") {
		t.Errorf("a bad --device-memory: %v", err)
	}
}

// train prints the plan's summary and refuses, with the plan, a
// configuration that cannot fit the machine the go backend runs on,
// before writing anything.
func TestTrainRefusesWhatCannotFit(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run")
	_, _, err := runStdin(t, "", "train", "--config", "../../configs/tiny.yaml", "--set", "model.tokenizer=../../assets/qwen3",
		"--set", "train.data=../../data/agentdojo-mini/train.jsonl", "--set", "model.hidden_size=16384", "--set", "model.num_hidden_layers=400", "--out", out)
	if err == nil || !strings.Contains(err.Error(), "does not fit the device") || !strings.Contains(err.Error(), "resident") {
		t.Fatalf("train of a 1.3T-parameter model on this machine: %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused run wrote %s", out)
	}
}
