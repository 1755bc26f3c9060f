package train

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResumeChecksTheCheckpointBeforeAllocating: `train --resume` on a
// checkpoint whose optimizer.safetensors declares shape [2³², 2³²] (the
// shape that once panicked in reflect), whose moments do not fit
// the model, or whose trainer_state.json is damaged, is an error naming
// the file, and nothing is trained.
func TestResumeChecksTheCheckpointBeforeAllocating(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	base := microOptions(t, filepath.Join(t.TempDir(), "out"))
	base.Train.Steps, base.Train.LogRollouts = 1, false
	if _, err := Run(context.Background(), base); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(base.Out, "checkpoint-1")
	pristine := map[string][]byte{}
	for _, name := range []string{"optimizer.safetensors", "trainer_state.json"} {
		data, err := os.ReadFile(filepath.Join(ckpt, name))
		if err != nil {
			t.Fatal(err)
		}
		pristine[name] = data
	}
	// sized is a safetensors file of header h and n bytes of data (its
	// tensors must tile them exactly); header, of 64.
	sized := func(h string, n int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		return append(append(b, h...), make([]byte, n)...)
	}
	header := func(h string) []byte { return sized(h, 64) }
	cases := []struct {
		name, file string
		data       []byte
		want       string
	}{
		{"2^64-element moment", "optimizer.safetensors",
			header(`{"exp_avg/model/norm/weight":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`),
			"needs more than the 64 bytes of data"},
		{"moment of another shape", "optimizer.safetensors",
			sized(`{"exp_avg/model/norm/weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 16),
			"tensor exp_avg/model/norm/weight has shape [4], the model's weight has [8]"},
		{"not a moment", "optimizer.safetensors",
			sized(`{"exp_avg/model/nope/weight":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, 16),
			"not an AdamW moment"},
		{"negative step count", "trainer_state.json", []byte(`{"step": 1, "optimizer_steps": -5, "seed": 1, "time": ""}`), "must not be negative"},
		{"unknown key", "trainer_state.json", []byte(`{"step": 1, "optimizer_steps": 1, "seed": 1, "time": "", "steps": 9}`), "unknown field"},
		{"key given twice", "trainer_state.json", []byte(`{"step": 1, "step": 0, "optimizer_steps": 1, "seed": 1, "time": ""}`), "step: given twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for name, data := range pristine {
				os.WriteFile(filepath.Join(ckpt, name), data, 0o644)
			}
			os.WriteFile(filepath.Join(ckpt, c.file), c.data, 0o644)
			o := base
			o.Resume, o.Train.Steps = true, 2
			res, err := Run(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.file) {
				t.Fatalf("error %v, want one naming %s and saying %q", err, c.file, c.want)
			}
			if res != nil && res.Steps > 1 {
				t.Fatalf("trained to step %d", res.Steps)
			}
		})
	}
}
