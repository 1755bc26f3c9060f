package plan

import (
	"fmt"
	"io"
	"strings"
)

// Summary is the plan on one line: the total against the usable device
// memory, the peak phase, the resident state, and the largest batch sizes
// that fit.
func (p *Plan) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "plan: %s", FormatSize(p.Total))
	fits, known := p.Fits()
	switch {
	case !known:
		b.WriteString(" (device memory unknown)")
	case fits:
		fmt.Fprintf(&b, " of %s usable: fits", FormatSize(p.Usable))
	default:
		fmt.Fprintf(&b, " of %s usable: does NOT fit", FormatSize(p.Usable))
	}
	var resident int64
	for _, q := range p.Resident {
		resident += q.Bytes
	}
	fmt.Fprintf(&b, "; resident %s + %s at the %s peak", FormatSize(resident), FormatSize(p.Total-resident), p.Peak)
	if known {
		fmt.Fprintf(&b, "; largest grpo.micro_batch_size %d, rollout.batch_size %d", p.MaxMicroBatch, p.MaxRolloutBatch)
	}
	return b.String()
}

// WriteText writes the plan as a table: the inputs it read, the resident
// parts, each phase with its parts and its total on top of the resident
// state, and the verdict.
func (p *Plan) WriteText(w io.Writer) error {
	in, sh := &p.Inputs, &p.Shapes
	var b strings.Builder
	fmt.Fprintf(&b, "model: %s, %d parameters, %d bytes a weight", in.Arch.String(), in.Arch.NumParameters(), in.WeightBytes)
	if in.MasterBytes > 0 {
		b.WriteString(", float32 master weights")
	}
	if in.LoRA.Rank > 0 {
		fmt.Fprintf(&b, "; LoRA rank %d on %s: %d trained parameters, the base frozen and the reference", in.LoRA.Rank,
			strings.Join(in.LoRA.Targets, ", "), in.trainedParameters())
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "micro-batch graph: %d rows × %d tokens", sh.TrainRows, sh.TrainTokens)
	if sh.TrainPrefix > 0 {
		fmt.Fprintf(&b, " after a shared prefix of %d", sh.TrainPrefix)
	}
	fmt.Fprintf(&b, ", %d targets a row; checkpointing %v; update groups of %d layers (0 = all); LM head chunk %d\n",
		sh.TrainTargets, in.Checkpointing, in.UpdateGroupLayers, in.LMHeadChunk)
	fmt.Fprintf(&b, "generation batch: %d rows, KV cache of %d slots, prefill of %d tokens a row\n",
		sh.RolloutRows, sh.RolloutCapacity, sh.RolloutPrefill)
	if in.InPlace {
		b.WriteString("backend updates donated buffers in place\n")
	} else {
		b.WriteString("backend writes new buffers for every update (no input/output aliasing: GoMLX v0.26 on XLA)\n")
	}
	b.WriteString("\nresident (every phase):\n")
	var resident int64
	for _, q := range p.Resident {
		fmt.Fprintf(&b, "  %-28s %12s\n", q.Name, FormatSize(q.Bytes))
		resident += q.Bytes
	}
	fmt.Fprintf(&b, "  %-28s %12s\n", "= resident", FormatSize(resident))
	for _, ph := range p.Phases {
		mark := ""
		if ph.Name == p.Peak {
			mark = "   <- peak"
		}
		fmt.Fprintf(&b, "\n%s (+ resident = %s)%s:\n", ph.Name, FormatSize(resident+ph.Bytes), mark)
		for _, q := range ph.Parts {
			fmt.Fprintf(&b, "  %-28s %12s\n", q.Name, FormatSize(q.Bytes))
		}
	}
	fmt.Fprintf(&b, "\nactivations of one micro-batch: %s without checkpointing, %s with\n",
		FormatSize(p.ActivationsPlain), FormatSize(p.ActivationsCheckpointed))
	fmt.Fprintf(&b, "total: %s\n", FormatSize(p.Total))
	if _, known := p.Fits(); known {
		fmt.Fprintf(&b, "device: %s, usable %s\n", FormatSize(in.DeviceBytes), FormatSize(p.Usable))
	} else {
		b.WriteString("device: unknown (pass --device-memory)\n")
	}
	fmt.Fprintf(&b, "%s\n", p.Summary())
	_, err := io.WriteString(w, b.String())
	return err
}

// JSON is the plan as `mageguard plan --json` prints it.
type JSON struct {
	Fits                *bool            `json:"fits"`                   // null when the device's memory is unknown
	TotalBytes          int64            `json:"total_bytes"`            // the sum of parts
	DeviceBytes         int64            `json:"device_bytes"`           // 0 = unknown
	UsableBytes         int64            `json:"usable_bytes"`           // device_bytes × the backend's usable fraction
	Parts               map[string]int64 `json:"parts"`                  // resident parts and the peak phase's ("phase.part")
	MaxMicroBatchSize   *int             `json:"max_micro_batch_size"`   // null when the device's memory is unknown
	MaxRolloutBatchSize *int             `json:"max_rollout_batch_size"` // null when the device's memory is unknown
	PeakPhase           string           `json:"peak_phase"`
	Phases              map[string]int64 `json:"phases"` // each phase's bytes on top of the resident state
	ActivationsBytes    map[string]int64 `json:"activations_bytes"`
	Shapes              map[string]int   `json:"shapes"`
}

// JSON returns the plan in the form of `mageguard plan --json`.
func (p *Plan) JSON() JSON {
	j := JSON{TotalBytes: p.Total, DeviceBytes: p.Inputs.DeviceBytes, UsableBytes: p.Usable,
		Parts: map[string]int64{}, PeakPhase: p.Peak, Phases: map[string]int64{},
		ActivationsBytes: map[string]int64{"without_checkpointing": p.ActivationsPlain, "with_checkpointing": p.ActivationsCheckpointed}}
	for _, q := range p.Parts() {
		j.Parts[q.Name] = q.Bytes
	}
	for _, ph := range p.Phases {
		j.Phases[ph.Name] = ph.Bytes
	}
	if fits, known := p.Fits(); known {
		j.Fits = &fits
		mb, rb := p.MaxMicroBatch, p.MaxRolloutBatch
		j.MaxMicroBatchSize, j.MaxRolloutBatchSize = &mb, &rb
	}
	sh := p.Shapes
	j.Shapes = map[string]int{
		"train_rows": sh.TrainRows, "train_prefix_tokens": sh.TrainPrefix, "train_tokens": sh.TrainTokens, "train_targets": sh.TrainTargets,
		"rollout_rows": sh.RolloutRows, "rollout_cache_slots": sh.RolloutCapacity, "rollout_prefill_tokens": sh.RolloutPrefill,
	}
	return j
}
