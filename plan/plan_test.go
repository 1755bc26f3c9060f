package plan

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/model"
)

// qwen3_4B is Qwen3-4B's config.json.
func qwen3_4B() model.Config {
	c := model.DefaultTinyConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 151936, 2560, 9728, 36
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 32, 8, 128
	c.TieWordEmbeddings = true
	return c
}

// base is a valid small input set: 2 layers, f32, no prefix.
func base() Inputs {
	c := model.DefaultTinyConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 64, 8, 16, 2
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 2, 1, 4
	c.BOSTokenID, c.EOSTokenIDs = 0, []int{1}
	return Inputs{
		Arch: c, WeightBytes: 4, MicroBatchSize: 2, InPlace: true,
		Train:   TrainShape{Rows: 2, RowTokens: 8, TargetTokens: 8},
		Rollout: RolloutShape{Rows: 2, PromptTokens: 10, NewTokens: 6},
	}
}

// The resident state of Qwen3-4B (4,022,468,096 parameters) trained in
// bfloat16 with float32 masters and a reference: 2 + 4 + 4 + 8 + 2 bytes a
// parameter.
func TestQwen3_4BResidentState(t *testing.T) {
	in := base()
	in.Arch, in.WeightBytes, in.MasterBytes, in.Reference = qwen3_4B(), 2, 4, true
	p, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4022468096
	if got := in.Arch.NumParameters(); got != n {
		t.Fatalf("Qwen3-4B has %d parameters, want %d", got, n)
	}
	want := map[string]int64{"weights": 2 * n, "master_weights": 4 * n, "gradient_accumulators": 4 * n, "adam_moments": 8 * n, "reference": 2 * n}
	for _, q := range p.Resident {
		if q.Bytes != want[q.Name] {
			t.Errorf("%s: %d bytes, want %d", q.Name, q.Bytes, want[q.Name])
		}
	}
	// β = 0 and no masters: neither is held.
	in.Reference, in.MasterBytes = false, 0
	p, _ = Compute(in)
	for _, q := range p.Resident {
		if (q.Name == "reference" || q.Name == "master_weights") && q.Bytes != 0 {
			t.Errorf("without them, %s holds %d bytes", q.Name, q.Bytes)
		}
	}
}

// The activations of base(), counted by hand from the package comment's
// table: R = 2 rows × T = 8 tokens (already padding sizes), K = 8 targets,
// f32 (w = 4), H 8, Q 8, KV 4, I 16, 2 heads over S = 8 keys, 2 layers.
func TestActivationsByHand(t *testing.T) {
	p, err := Compute(base())
	if err != nil {
		t.Fatal(err)
	}
	perToken := int64((8+4*4)*8 + (4+3*4)*8 + (4+3*4)*4 + 5*4*16 + (4+4)*2*8) // 192 + 128 + 64 + 320 + 128 = 832
	layer := 16 * perToken                                                    // 2 × 8 tokens
	final := int64(16*(4+4)*8 + 2*8*8*4)                                      // final norm of 16 tokens + the 16 gathered hidden states
	if want := 2*layer + final; p.ActivationsPlain != want {
		t.Errorf("activations %d, want %d", p.ActivationsPlain, want)
	}
	// Checkpointed: each layer's input (16 tokens × H × w) and one layer.
	if want := 2*16*8*4 + layer + final; p.ActivationsCheckpointed != want {
		t.Errorf("checkpointed activations %d, want %d", p.ActivationsCheckpointed, want)
	}
	// The unchunked LM head: three float32 [16 targets × 64 ids].
	if got := p.Phase("backward_head").Parts[1].Bytes; got != 3*16*64*4 {
		t.Errorf("LM head %d bytes, want %d", got, 3*16*64*4)
	}
}

// On XLA the update writes new weights, masters and moments (and zeroed
// accumulators) for its largest group: 4 of Qwen3-4B's layers (4 ×
// 100,930,816 parameters) outweigh the embedding (151,936 × 2560); with
// groups of one layer the embedding is the largest; 0 is everything.
func TestUpdateGroups(t *testing.T) {
	const layer, emb, all = 100930816, 151936 * 2560, 4022468096
	for _, tc := range []struct {
		layers int
		want   int64
	}{{4, 4 * layer}, {1, emb}, {0, all}, {100, 36 * layer}} {
		in := base()
		in.Arch, in.WeightBytes, in.MasterBytes, in.InPlace, in.UpdateGroupLayers = qwen3_4B(), 2, 4, false, tc.layers
		p, err := Compute(in)
		if err != nil {
			t.Fatal(err)
		}
		want := []Part{{"new_weights", 2 * tc.want}, {"new_master_weights", 4 * tc.want}, {"new_adam_moments", 8 * tc.want}, {"zeroed_accumulators", 4 * tc.want}}
		if got := p.Phase("update").Parts; !slices.Equal(got, want) {
			t.Errorf("groups of %d layers: %v, want %v", tc.layers, got, want)
		}
	}
}

// The padding of the trainer and the generator: trainer rows to powers of
// two (micro-batch rows at most micro_batch_size), generator rows and
// capacities as model.GenerationShape rounds them (48 rows stay 48; 2,075 +
// 256 slots → 2,368, a multiple of 64), lengths to buckets, a prefix shared
// only from 16 tokens on and by 2 rows or more.
func TestShapesArePaddedAsTheGraphsAre(t *testing.T) {
	in := base()
	in.MicroBatchSize, in.SharedPrefix = 8, true
	in.Train = TrainShape{Rows: 5, PrefixTokens: 475, RowTokens: 1856, TargetTokens: 256}
	in.Rollout = RolloutShape{Rows: 48, PrefixTokens: 475, PromptTokens: 2075, NewTokens: 256}
	p, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	want := Shapes{TrainRows: 8, TrainPrefix: 512, TrainTokens: 2048, TrainTargets: 256,
		RolloutRows: 48, RolloutCapacity: 2368, RolloutPrefill: 2048}
	if p.Shapes != want {
		t.Errorf("shapes %+v, want %+v", p.Shapes, want)
	}
	in.Train.PrefixTokens = 15 // too short to share: it joins each row's own tokens
	p, _ = Compute(in)
	if p.Shapes.TrainPrefix != 0 || p.Shapes.TrainTokens != 2048 {
		t.Errorf("a 15-token prefix: shapes %+v, want no prefix and 1871 → 2048 tokens (steps of 256 above 1024)", p.Shapes)
	}
}

// Total is the resident state plus the largest phase, and the sum of
// Parts(); a plan that fits is no larger than the usable memory.
func TestTotalIsResidentPlusPeakPhase(t *testing.T) {
	for _, tweak := range []func(*Inputs){
		func(*Inputs) {},
		func(in *Inputs) { in.InPlace = false },
		func(in *Inputs) { in.WeightBytes, in.MasterBytes, in.Reference = 2, 4, true },
		func(in *Inputs) { in.Checkpointing, in.UpdateGroupLayers = true, 1 },
		func(in *Inputs) { in.SharedPrefix, in.Train.PrefixTokens = true, 32 },
		func(in *Inputs) { in.LMHeadChunk = 16 },
		func(in *Inputs) { in.Arch = qwen3_4B() },
	} {
		in := base()
		tweak(&in)
		p, err := Compute(in)
		if err != nil {
			t.Fatal(err)
		}
		var sum, resident, peak int64
		for _, q := range p.Parts() {
			sum += q.Bytes
		}
		for _, q := range p.Resident {
			resident += q.Bytes
		}
		for _, ph := range p.Phases {
			var s int64
			for _, q := range ph.Parts {
				s += q.Bytes
			}
			if s != ph.Bytes {
				t.Errorf("phase %s: parts add up to %d, phase says %d", ph.Name, s, ph.Bytes)
			}
			peak = max(peak, ph.Bytes)
		}
		if sum != p.Total || p.Total != resident+peak || p.Phase(p.Peak).Bytes != peak {
			t.Errorf("%+v: total %d, parts %d, resident %d + peak %d (%s)", in, p.Total, sum, resident, peak, p.Peak)
		}
	}
}

// MaxMicroBatch and MaxRolloutBatch are the largest sizes that fit: one
// more does not (generation batches round up to a power of two).
func TestLargestBatchSizesFit(t *testing.T) {
	in := base()
	in.Arch, in.WeightBytes, in.MasterBytes, in.Reference, in.InPlace = qwen3_4B(), 2, 4, true, false
	in.Checkpointing, in.UpdateGroupLayers, in.LMHeadChunk, in.SharedPrefix = true, 4, 8192, true
	in.MicroBatchSize = 8
	in.Train = TrainShape{Rows: 8, PrefixTokens: 475, RowTokens: 1856, TargetTokens: 256}
	in.Rollout = RolloutShape{Rows: 16, PrefixTokens: 475, PromptTokens: 2075, NewTokens: 256}
	in.DeviceBytes, in.UsableFraction = 141e9, 0.95
	p, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxMicroBatch < 1 || p.MaxRolloutBatch < 1 {
		t.Fatalf("nothing fits: %s", p.Summary())
	}
	try := func(micro, rollout int) bool {
		x := in
		x.MicroBatchSize, x.Train.Rows, x.Rollout.Rows = micro, micro, rollout
		q, err := Compute(x)
		if err != nil {
			t.Fatal(err)
		}
		fits, _ := q.Fits()
		return fits
	}
	if !try(p.MaxMicroBatch, in.Rollout.Rows) || try(p.MaxMicroBatch+1, in.Rollout.Rows) {
		t.Errorf("micro-batch %d should be the largest that fits", p.MaxMicroBatch)
	}
	if !try(in.MicroBatchSize, p.MaxRolloutBatch) || try(in.MicroBatchSize, p.MaxRolloutBatch+1) {
		t.Errorf("rollout batch %d should be the largest that fits", p.MaxRolloutBatch)
	}
	if p.MaxRolloutBatch&(p.MaxRolloutBatch-1) != 0 {
		t.Errorf("rollout batch %d: generation runs powers of two, so the largest is one", p.MaxRolloutBatch)
	}
}

// Without the device's memory there is no verdict: fits and the largest
// sizes are null in JSON.
func TestUnknownDeviceHasNoVerdict(t *testing.T) {
	p, err := Compute(base())
	if err != nil {
		t.Fatal(err)
	}
	if _, known := p.Fits(); known || p.MaxMicroBatch != -1 || p.MaxRolloutBatch != -1 {
		t.Errorf("unknown device: fits known %v, largest %d, %d", known, p.MaxMicroBatch, p.MaxRolloutBatch)
	}
	data, err := json.Marshal(p.JSON())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"fits":null`, `"max_micro_batch_size":null`, `"max_rollout_batch_size":null`, `"device_bytes":0`} {
		if !strings.Contains(string(data), key) {
			t.Errorf("JSON lacks %s: %s", key, data)
		}
	}
	if !strings.Contains(p.Summary(), "device memory unknown") {
		t.Errorf("summary %q", p.Summary())
	}
}

// Bad inputs are refused before anything is computed, naming the field.
func TestBadInputsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		tweak func(*Inputs)
		want  string
	}{
		{func(in *Inputs) { in.WeightBytes = 3 }, "weight bytes"},
		{func(in *Inputs) { in.MicroBatchSize = 0 }, "micro_batch_size"},
		{func(in *Inputs) { in.Train.TargetTokens = 0 }, "train shape"},
		{func(in *Inputs) { in.Rollout.Rows = 0 }, "rollout shape"},
		{func(in *Inputs) { in.UsableFraction = 1.5 }, "usable fraction"},
		{func(in *Inputs) { in.Arch.HiddenSize = 0 }, "hidden_size"},
	} {
		in := base()
		tc.tweak(&in)
		if _, err := Compute(in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one naming %q", err, tc.want)
		}
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"141GB", 141e9}, {"80GiB", 80 << 30}, {"1.5 TB", 1.5e12}, {"512MiB", 512 << 20},
		{"1000B", 1000}, {"2kb", 2000}, {"64 B", 64}, {"1TiB", 1 << 40},
	} {
		if got, err := ParseSize(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v, want %d", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"141", `size "141" has no unit: write 141GB (10^9 bytes) or 141GiB (2^30 bytes)`},
		{"", "want a positive number with a unit"}, {"GB", "want a positive number"}, {"-5GB", "want a positive number"},
		{"0B", "want a positive number"}, {"12XB", "want a positive number"}, {"1e400GB", "want a positive number"}, {"NaN", "want a positive number"},
	} {
		if _, err := ParseSize(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSize(%q): %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}

// The kept prefixes of Qwen3-4B in bfloat16, by hand: a 475-token memory
// system prompt and a 300-token judge one are prefilled at 512 slots each
// (prompts round up to a power of two), 2 (k, v) × 36 layers × 512 × 8 KV
// heads × 128 × 2 bytes = 75,497,472 bytes each, held in every phase; a
// prefill also copies one to the batch's S cache slots.
func TestKeptPrefixesByHand(t *testing.T) {
	in := base()
	in.Arch, in.WeightBytes = qwen3_4B(), 2
	in.Rollout = RolloutShape{Rows: 16, PrefixTokens: 475, PromptTokens: 2331 - 256, NewTokens: 256}
	for _, c := range []struct {
		kept        []int
		resident    int64
		widenedSlot int64 // bytes a cache slot of the widened copy
	}{
		{nil, 0, 0},
		{[]int{475}, 75497472, 2 * 36 * 8 * 128 * 2},
		{[]int{475, 300}, 2 * 75497472, 2 * 36 * 8 * 128 * 2},
	} {
		in.KeptPrefixes = c.kept
		p, err := Compute(in)
		if err != nil {
			t.Fatal(err)
		}
		var got int64 = -1
		for _, q := range p.Resident {
			if q.Name == "kept_prefixes" {
				got = q.Bytes
			}
		}
		if got != c.resident {
			t.Errorf("kept %v: resident kept_prefixes %d bytes, want %d", c.kept, got, c.resident)
		}
		if p.Shapes.RolloutCapacity != 2368 {
			t.Fatalf("cache of %d slots, want 2368 (2331 rounded up to a multiple of 64)", p.Shapes.RolloutCapacity)
		}
		for _, q := range p.Phase("prefill").Parts {
			if q.Name == "kept_prefix_widened" && q.Bytes != 2368*c.widenedSlot {
				t.Errorf("kept %v: prefill's widened copy %d bytes, want %d", c.kept, q.Bytes, 2368*c.widenedSlot)
			}
		}
	}
	in.KeptPrefixes = []int{1, 2, 3, 4, 5}
	if _, err := Compute(in); err == nil || !strings.Contains(err.Error(), "at most 4") {
		t.Errorf("5 kept prefixes: %v, want an error naming the bound", err)
	}
	in.KeptPrefixes = []int{0}
	if _, err := Compute(in); err == nil || !strings.Contains(err.Error(), ">= 1") {
		t.Errorf("a 0-token kept prefix: %v, want an error", err)
	}
}
