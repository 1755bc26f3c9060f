// Package plan states what a mageguard configuration needs in device memory
// on one device, before anything is allocated: the resident state (weights,
// master weights, gradient accumulators, AdamW moments, the frozen
// reference), and the transient peak of each phase of a training step — a
// micro-batch's forward and backward (activations, the LM head's working
// set), the optimizer update, and a rollout batch's generation (KV cache,
// prefill; the kept prefixes' keys and values are resident) — with the
// total, whether it fits, and the largest grpo.micro_batch_size and
// rollout.batch_size that fit.
//
// Every figure is a formula of the architecture and the graph shapes (the
// trainer's and the generator's padding included), counting the tensors the
// graphs of packages model and grpo hold when their ops run in program
// order: a tensor lives from the op that makes it to its last consumer, and
// an op writes into an input it consumes for the last time when the shapes
// agree. Per decoder layer and token, the backward keeps (w = bytes of
// model.dtype; H hidden, Q = query heads × head_dim, KV = kv heads ×
// head_dim, I = MLP width, S = keys a token attends to):
//
//	(8+4w)·H      both RMSNorm inputs in float32, their normalized values and products (w each)
//	(4+3w)·Q      q before its norm (float32), normalized, after RoPE, the attention output
//	(4+3w)·KV     the same for k (the attention output's place taken by v)
//	5w·I          gate, up, sigmoid(gate), silu(gate), silu ⊙ up
//	(4+w)·nq·S    softmax's exponentials (float32) and the probabilities
//
// The pure-Go backend runs ops in that order with ops_sequential; its
// default parallel scheduler starts backward ops as soon as their forward
// inputs exist and holds about twice the activations (docs/real-use.md has
// both measured). XLA schedules and fuses on its own: the GPU check
// (scripts/gpu-check.sh) records its peak beside the plan's.
package plan

import (
	"fmt"
	"slices"

	"github.com/mageguard/mageguard/model"
)

// f32 is the size of a float32, the dtype of master weights, gradient
// accumulators, AdamW moments, softmax statistics and log-probs.
const f32 = 4

// TrainShape is the shape of a training step: Rows sequences of one role,
// each starting with PrefixTokens tokens they all share (the role's system
// prompt), then RowTokens of their own, the last TargetTokens of which are
// the completion in the loss. Compute pads them as the trainer does.
type TrainShape struct {
	Rows         int `json:"rows"`          // sequences (a micro-batch holds at most micro_batch_size of them)
	PrefixTokens int `json:"prefix_tokens"` // tokens every row starts with (0 = none)
	RowTokens    int `json:"row_tokens"`    // each row's tokens after the prefix, the completion included
	TargetTokens int `json:"target_tokens"` // completion tokens of each row: the LM head's positions
}

// RolloutShape is the shape of a generation batch: Rows prompts, the
// longest of PromptTokens tokens, all starting with the same PrefixTokens
// (the role's system prompt), each continued by NewTokens tokens.
type RolloutShape struct {
	Rows         int `json:"rows"`          // prompts generated together (rollout.batch_size)
	PrefixTokens int `json:"prefix_tokens"` // tokens every prompt starts with (0 = none)
	PromptTokens int `json:"prompt_tokens"` // the longest prompt
	NewTokens    int `json:"new_tokens"`    // tokens generated per prompt at most
}

// Inputs is everything a plan depends on.
type Inputs struct {
	Arch        model.Config // the architecture (config.json, or the model.* keys)
	WeightBytes int          // bytes per weight in model.dtype: 4 (float32) or 2 (bfloat16)
	// MasterBytes is the bytes per float32 master weight the trainer keeps
	// when grpo.master_dtype differs from model.dtype; 0 = none.
	MasterBytes int
	Reference   bool // β > 0: a frozen copy of the starting weights in model.dtype (none with LoRA)
	LoRA        LoRA // the LoRA adapter trained instead of the weights (lora.go); rank 0 = none

	Train          TrainShape // the longest micro-batch of a step
	MicroBatchSize int        // grpo.micro_batch_size
	SharedPrefix   bool       // grpo.shared_prefix
	// Checkpointing is grpo.gradient_checkpointing: the backward keeps each
	// decoder layer's input and recomputes one layer's activations at a time.
	Checkpointing bool
	// UpdateGroupLayers is grpo.update_group_layers: decoder layers per
	// optimizer-update group (the embedding/LM head and the final norm are
	// groups of their own); 0 = everything in one update.
	UpdateGroupLayers int
	LMHeadChunk       int // model.lm_head_chunk (0 = the whole vocabulary at once)
	// AttentionBlock is model.attention_block: training graphs' attention runs over blocks of
	// this many queries and its backward recomputes each block's probabilities (0 = the plain
	// softmax, whose probabilities every layer keeps).
	AttentionBlock int

	Rollout RolloutShape // the largest generation batch
	// KeptPrefixes are the lengths in tokens of the static prompt prefixes
	// (each role's system prompt) whose keys and values the local generator
	// keeps across batches once it has prefilled them (model's kept
	// prefixes; none with a remote generator): held from the first
	// generation on, until the weights change and the next generation
	// prefills them again.
	KeptPrefixes []int

	// InPlace says the backend writes an update into the donated buffer it
	// replaces (the pure-Go backend). GoMLX v0.26's XLA path compiles
	// without input/output aliasing: new gradient accumulators, weights,
	// moments and KV caches are allocated beside the old ones and the old
	// ones freed after the run.
	InPlace bool

	DeviceBytes int64 // the device's memory (0 = unknown)
	// UsableFraction is the share of DeviceBytes the backend lets the model
	// use (the XLA client's memory fraction); 0 = all of it.
	UsableFraction float64
}

// Validate checks the inputs; errors name the field.
func (in *Inputs) Validate() error {
	if err := in.Arch.Validate(); err != nil {
		return fmt.Errorf("architecture: %w", err)
	}
	switch {
	case in.WeightBytes != 2 && in.WeightBytes != 4:
		return fmt.Errorf("weight bytes must be 2 or 4, got %d", in.WeightBytes)
	case in.MasterBytes != 0 && in.MasterBytes != 4:
		return fmt.Errorf("master bytes must be 0 or 4, got %d", in.MasterBytes)
	case in.Train.Rows < 1 || in.Train.RowTokens < 2 || in.Train.TargetTokens < 1 || in.Train.PrefixTokens < 0:
		return fmt.Errorf("train shape %+v: want rows >= 1, row tokens >= 2, target tokens >= 1, prefix tokens >= 0", in.Train)
	case in.MicroBatchSize < 1:
		return fmt.Errorf("micro_batch_size must be >= 1, got %d", in.MicroBatchSize)
	case in.UpdateGroupLayers < 0:
		return fmt.Errorf("update_group_layers must be >= 0, got %d", in.UpdateGroupLayers)
	case in.LMHeadChunk < 0:
		return fmt.Errorf("lm_head_chunk must be >= 0, got %d", in.LMHeadChunk)
	case in.Rollout.Rows < 1 || in.Rollout.PromptTokens < 1 || in.Rollout.NewTokens < 1 || in.Rollout.PrefixTokens < 0:
		return fmt.Errorf("rollout shape %+v: want rows, prompt tokens and new tokens >= 1", in.Rollout)
	case len(in.KeptPrefixes) > model.MaxKeptPrefixes:
		return fmt.Errorf("kept prefixes: %d, a model keeps at most %d", len(in.KeptPrefixes), model.MaxKeptPrefixes)
	case slices.ContainsFunc(in.KeptPrefixes, func(n int) bool { return n < 1 }):
		return fmt.Errorf("kept prefixes %v: each must be >= 1 token", in.KeptPrefixes)
	case in.DeviceBytes < 0:
		return fmt.Errorf("device bytes must be >= 0, got %d", in.DeviceBytes)
	case in.UsableFraction < 0 || in.UsableFraction > 1:
		return fmt.Errorf("usable fraction must be in [0, 1], got %g", in.UsableFraction)
	}
	return nil
}

// Part is one named amount of memory.
type Part struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}

// Phase is one phase of a training step and the memory it holds beyond
// the resident state, at its peak.
type Phase struct {
	Name  string `json:"name"` // "backward", "gradients", "update", "prefill" or "decode"
	Parts []Part `json:"parts"`
	Bytes int64  `json:"bytes"` // the sum of Parts
}

// Shapes are the padded graph shapes the plan sized.
type Shapes struct {
	TrainRows, TrainPrefix, TrainTokens, TrainTargets int // R, P (0 = not shared), T, K of a micro-batch graph
	RolloutRows, RolloutCapacity, RolloutPrefill      int // B, KV-cache slots S, prefill tokens per row
}

// Plan is what a configuration needs on one device.
type Plan struct {
	Inputs   Inputs
	Shapes   Shapes
	Resident []Part  // held through the whole run
	Phases   []Phase // each held on top of Resident, one at a time
	Peak     string  // the phase with the largest transient
	Total    int64   // Resident + the peak phase
	// Activations of one micro-batch without and with per-layer
	// checkpointing (the train phase uses the one Inputs.Checkpointing picks).
	ActivationsPlain, ActivationsCheckpointed int64
	Usable                                    int64 // the bytes the model may use (0 = unknown device)
	// MaxMicroBatch and MaxRolloutBatch are the largest
	// grpo.micro_batch_size and rollout.batch_size that fit, the rest
	// unchanged (0 = none fits; -1 = unknown device).
	MaxMicroBatch, MaxRolloutBatch int
}

// Fits reports whether the total fits the usable device memory; ok is
// false when the device's memory is unknown.
func (p *Plan) Fits() (fits, ok bool) {
	if p.Usable <= 0 {
		return false, false
	}
	return p.Total <= p.Usable, true
}

// Parts returns the resident parts and the peak phase's parts, named
// "phase.part": the parts whose sum is Total.
func (p *Plan) Parts() []Part {
	out := slices.Clone(p.Resident)
	for _, ph := range p.Phases {
		if ph.Name == p.Peak {
			for _, q := range ph.Parts {
				out = append(out, Part{Name: ph.Name + "." + q.Name, Bytes: q.Bytes})
			}
		}
	}
	return out
}

// Phase returns the phase called name (nil if none).
func (p *Plan) Phase(name string) *Phase {
	for i := range p.Phases {
		if p.Phases[i].Name == name {
			return &p.Phases[i]
		}
	}
	return nil
}

// Compute returns the plan of in: the parts, the total, and (when the
// device's memory is known) the largest batch sizes that fit.
func Compute(in Inputs) (*Plan, error) {
	if err := in.Validate(); err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	p := compute(in)
	p.MaxMicroBatch, p.MaxRolloutBatch = -1, -1
	if p.Usable > 0 {
		p.MaxMicroBatch = largest(func(n int) bool {
			x := in
			x.MicroBatchSize, x.Train.Rows = n, n
			return compute(x).Total <= p.Usable
		})
		p.MaxRolloutBatch = largest(func(n int) bool {
			x := in
			x.Rollout.Rows = n
			return compute(x).Total <= p.Usable
		})
	}
	return p, nil
}

// maxBatch bounds the batch-size search.
const maxBatch = 1 << 16

// largest returns the largest n in [1, maxBatch] with fits(n), for fits
// monotone (true up to some n, false above); 0 when fits(1) is false.
func largest(fits func(int) bool) int {
	if !fits(1) {
		return 0
	}
	lo, hi := 1, maxBatch+1 // fits(lo), !fits(hi) (hi beyond the range)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// compute is Compute without the batch-size search.
func compute(in Inputs) *Plan {
	c := &in.Arch
	p := &Plan{Inputs: in}
	emb, perLayer, final := c.ParameterGroups()
	trained := in.trainedParameters() // every parameter, or the LoRA adapter's
	w := int64(in.WeightBytes)
	p.Resident = resident(in) // what every phase holds

	// Train: one micro-batch's forward and backward.
	p.Shapes = trainShapes(in)
	sh := p.Shapes
	p.ActivationsPlain = activations(in, sh, false)
	p.ActivationsCheckpointed = activations(in, sh, true)
	act := p.ActivationsPlain
	if in.Checkpointing {
		act = p.ActivationsCheckpointed
	}
	// The backward starts with the LM head, then runs the layers from the
	// last: all saved activations are held while either works.
	p.Phases = append(p.Phases,
		phase("backward_head", []Part{{"activations", act}, {"lm_head", lmHead(in, sh)}}),
		phase("backward_layer", []Part{{"activations", act}, {"layer", layerBackward(in, sh)}}))
	// The end of the backward: every gradient, and the embedding's lookup
	// gradient when the LM head is tied to it (added to the head's last).
	lookup := embeddingLookup(c) * w
	if in.LoRA.Rank > 0 {
		lookup = 0 // the embedding is frozen
	}
	if in.InPlace {
		// Ops run in program order add the gradients into the accumulators
		// after the whole backward: all of them are held in model.dtype
		// until then.
		p.Phases = append(p.Phases, phase("gradients", []Part{
			{"gradients", trained * w},
			{"embedding_lookup", lookup},
		}))
	} else {
		// The new accumulators, beside the old ones until the run ends.
		p.Phases = append(p.Phases, phase("gradients", []Part{
			{"new_gradient_accumulators", trained * f32},
			{"embedding_lookup", lookup},
		}))
	}

	// Update: AdamW, one group of parameters at a time.
	group := largestGroup(in, emb, perLayer, final)
	if in.LoRA.Rank > 0 {
		group = in.adapterGroup()
	}
	var update []Part
	if in.InPlace {
		// New moments and weights replace the old in place; the zeroed
		// accumulators of the group are new, and so are the float32
		// temporaries of its largest tensor's update: the new moments and
		// their bias-corrected copies, and the float32 weight when
		// model.dtype is not float32.
		temps := int64(4)
		if w != f32 {
			temps++
		}
		update = []Part{
			{"zeroed_accumulators", group * f32},
			{"temporaries", temps * in.largestTrainedTensor() * f32},
		}
	} else {
		update = []Part{
			{"new_weights", group * w},
			{"new_master_weights", group * int64(in.MasterBytes)},
			{"new_adam_moments", group * 2 * f32},
			{"zeroed_accumulators", group * f32},
		}
	}
	p.Phases = append(p.Phases, phase("update", update))

	// Rollout: one generation batch, its prefill, then its decoding steps.
	prefill, decode := generation(in, &p.Shapes)
	p.Phases = append(p.Phases, phase("prefill", prefill), phase("decode", decode))

	var peak *Phase
	for i := range p.Phases {
		if peak == nil || p.Phases[i].Bytes > peak.Bytes {
			peak = &p.Phases[i]
		}
	}
	p.Peak = peak.Name
	for _, q := range p.Resident {
		p.Total += q.Bytes
	}
	p.Total += peak.Bytes
	if in.DeviceBytes > 0 {
		f := in.UsableFraction
		if f == 0 {
			f = 1
		}
		p.Usable = int64(float64(in.DeviceBytes) * f)
	}
	return p
}

// resident is what every phase holds: the weights in model.dtype, and the trained parameters'
// float32 masters (when model.dtype is not float32), gradient accumulators and AdamW moments —
// every weight's, or the LoRA adapter's (then also its weights) — and the reference copy when
// β > 0 without LoRA (with LoRA the frozen base is the reference).
func resident(in Inputs) []Part {
	nParams, trained := in.Arch.NumParameters(), in.trainedParameters()
	w := int64(in.WeightBytes)
	parts := []Part{
		{"weights", nParams * w},
		{"master_weights", trained * int64(in.MasterBytes)},
		{"gradient_accumulators", trained * f32},
		{"adam_moments", trained * 2 * f32},
	}
	switch {
	case in.LoRA.Rank > 0:
		parts = append(parts, Part{"adapter_weights", trained * w}, Part{"reference", 0})
	case in.Reference:
		parts = append(parts, Part{"reference", nParams * w})
	default:
		parts = append(parts, Part{"reference", 0})
	}
	return append(parts, Part{"kept_prefixes", keptPrefixes(in)})
}

func phase(name string, parts []Part) Phase {
	ph := Phase{Name: name, Parts: parts}
	for _, q := range parts {
		ph.Bytes += q.Bytes
	}
	return ph
}

// TrainTotal is what an optimizer step alone holds at its peak: the
// resident state and the largest of its phases, with that phase's name.
func (p *Plan) TrainTotal() (int64, string) {
	var peak *Phase
	for _, name := range trainPhases {
		if ph := p.Phase(name); ph != nil && (peak == nil || ph.Bytes > peak.Bytes) {
			peak = ph
		}
	}
	total := peak.Bytes
	for _, q := range p.Resident {
		total += q.Bytes
	}
	return total, peak.Name
}

// GenerationTotal is what generation alone holds at its peak: the weights
// and the larger of the prefill and a decoding step (what inference with
// the model needs, without a trainer).
func (p *Plan) GenerationTotal() int64 {
	return p.Resident[0].Bytes + max(p.Phase("prefill").Bytes, p.Phase("decode").Bytes)
}
