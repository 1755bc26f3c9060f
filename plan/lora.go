package plan

import "github.com/mageguard/mageguard/model"

// LoRA is the LoRA adapter a plan trains instead of the model's weights (model.lora, or an
// adapter checkpoint as model.path): the base stays resident in model.dtype and frozen — it is
// also the KL reference, so no copy is held — and the gradient accumulators, AdamW moments,
// float32 masters and the update's working set are the adapter's, r·(in + out) parameters per
// adapted projection. The backward still keeps every layer's activations (the adapter's
// gradients need each projection's input), plus x·Aᵀ and its scaled copy per adapted
// projection; the frozen LM head computes no weight gradient.
type LoRA struct {
	Rank    int      `json:"rank"` // r; 0 = no adapter: every weight is trained
	Targets []string `json:"targets"`
}

// trainedParameters is what the optimizer trains: every parameter, or the adapter's.
func (in *Inputs) trainedParameters() int64 {
	if in.LoRA.Rank == 0 {
		return in.Arch.NumParameters()
	}
	return model.NumAdapterParameters(&in.Arch, in.LoRA.Rank, in.LoRA.Targets)
}

// adapterGroup is the adapter parameters of the largest update group: update_group_layers
// layers' (all of them when 0).
func (in *Inputs) adapterGroup() int64 {
	L := int64(in.Arch.NumHiddenLayers)
	perLayer := in.trainedParameters() / L
	if g := int64(in.UpdateGroupLayers); g > 0 {
		return min(g, L) * perLayer
	}
	return L * perLayer
}

// largestTrainedTensor is the element count of the largest trained tensor: the model's
// largest weight, or the adapter's largest A [r, in] or B [out, r].
func (in *Inputs) largestTrainedTensor() int64 {
	c := &in.Arch
	if in.LoRA.Rank == 0 {
		return largestTensor(c)
	}
	r := int64(in.LoRA.Rank)
	sizes := map[string]int64{
		"q_proj": int64(c.NumAttentionHeads * c.HeadDim), "o_proj": int64(c.NumAttentionHeads * c.HeadDim),
		"k_proj": int64(c.NumKeyValueHeads * c.HeadDim), "v_proj": int64(c.NumKeyValueHeads * c.HeadDim),
		"gate_proj": int64(c.IntermediateSize), "up_proj": int64(c.IntermediateSize), "down_proj": int64(c.IntermediateSize),
	}
	var n int64
	for _, t := range in.LoRA.Targets {
		n = max(n, r*max(sizes[t], int64(c.HiddenSize)))
	}
	return n
}

// adapterSaved is what one layer's backward keeps of the adapter for tokens token positions:
// x·Aᵀ and s·x·Aᵀ ([tokens, r] in model.dtype) per adapted projection.
func (in *Inputs) adapterSaved(tokens int64) int64 {
	return tokens * 2 * int64(in.LoRA.Rank) * int64(in.WeightBytes) * int64(len(in.LoRA.Targets))
}
