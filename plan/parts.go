package plan

// The formulas of the plan's parts: the padded training shapes, what a
// micro-batch's forward and backward hold, and what generation holds (the
// package comment's table).

import (
	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/model"
)

// trainShapes pads the train shape as the trainer does (grpo.GraphRows,
// grpo.PaddedLength): the rows of one micro-batch, its shared prefix when
// grpo.shared_prefix applies, its own tokens and targets.
func trainShapes(in Inputs) Shapes {
	t := in.Train
	rows := min(t.Rows, in.MicroBatchSize)
	var sh Shapes
	sh.TrainRows = grpo.GraphRows(in.MicroBatchSize, rows)
	own := t.RowTokens
	if in.SharedPrefix && rows >= 2 && t.PrefixTokens >= grpo.MinSharedPrefix {
		sh.TrainPrefix = grpo.PaddedLength(t.PrefixTokens)
	} else {
		own += t.PrefixTokens
	}
	sh.TrainTokens = grpo.PaddedLength(own)
	sh.TrainTargets = grpo.PaddedLength(t.TargetTokens)
	return sh
}

// layerSaved is what the backward keeps of one decoder layer for n query
// tokens attending to s keys each (the package comment's table), without
// the keys and values when shared (they are then the concatenated prefix +
// row tensors, counted by the caller).
func layerSaved(c *model.Config, w, n, s int64, shared, blocked bool) int64 {
	H, I := int64(c.HiddenSize), int64(c.IntermediateSize)
	Q := int64(c.NumAttentionHeads * c.HeadDim)
	KV := int64(c.NumKeyValueHeads * c.HeadDim)
	kv := (4 + 3*w) * KV
	if shared {
		kv = (4 + w) * KV // k before and after its norm; RoPE'd k and v live in the concatenation
	}
	attention := (4 + w) * int64(c.NumAttentionHeads) * s // the softmax's exponentials and probabilities
	if blocked {
		attention = f32 * int64(c.NumAttentionHeads) // only the rows' log-sum-exps (attention.go)
	}
	perToken := (8+4*w)*H + (4+3*w)*Q + kv + 5*w*I + attention
	return n * perToken
}

// activations is what one micro-batch's backward keeps: every layer's
// saved tensors for the rows (and the shared prefix, at batch 1), the
// final norm's, and the hidden states at the target positions; with
// checkpointing, each layer's input instead, plus one layer's saved
// tensors being recomputed.
func activations(in Inputs, sh Shapes, checkpointed bool) int64 {
	c := &in.Arch
	w := int64(in.WeightBytes)
	H := int64(c.HiddenSize)
	KV := int64(c.NumKeyValueHeads * c.HeadDim)
	L := int64(c.NumHiddenLayers)
	R, P, T, K := int64(sh.TrainRows), int64(sh.TrainPrefix), int64(sh.TrainTokens), int64(sh.TrainTargets)
	shared := P > 0
	blocked := in.AttentionBlock > 0
	layer := layerSaved(c, w, R*T, P+T, shared, blocked)
	if shared {
		layer += layerSaved(c, w, P, P, false, blocked) // the prefix's own forward, once
		layer += 2 * R * (P + T) * KV * w               // the rows' keys and values: prefix broadcast ++ own
	}
	tokens := R*T + P
	layer += in.adapterSaved(tokens)
	final := tokens*(f32+w)*H + R*K*H*w // the final norm's input and product; the gathered hidden states
	if !checkpointed {
		return L*layer + final
	}
	inputs := L * tokens * H * w // each layer's input, kept for the recomputation
	return inputs + layer + final
}

// layerBackward is the working set of one decoder layer's backward: the
// larger of its attention's (about three float32 tensors of the scores'
// shape: the probabilities' gradient, the softmax's, the broadcast sum) and
// its MLP's (three float32 [tokens × I]).
func layerBackward(in Inputs, sh Shapes) int64 {
	c := &in.Arch
	R, P, T := int64(sh.TrainRows), int64(sh.TrainPrefix), int64(sh.TrainTokens)
	nq, I := int64(c.NumAttentionHeads), int64(c.IntermediateSize)
	tq, tp := T, P // query rows whose scores exist at once
	if b := int64(in.AttentionBlock); b > 0 {
		tq, tp = min(T, b), min(P, b)
	}
	scores := R*nq*tq*(P+T) + nq*tp*P
	return 3 * max(scores, (R*T+P)*I) * f32
}

// lmHead is the LM head's working set at its peak, in the backward. Over
// vocabulary chunks of C rows (lmhead.go): the copy of the head weight that its
// custom-gradient identity makes and the chunks' weight gradients ([V, H] each, model.dtype, until
// they are concatenated), with one chunk's [targets × C] float32 logits.
// Without chunks: the [targets × V] logits' exponentials, the gradient
// scattered at the targets and the log-sum-exp's broadcast gradient, in
// float32.
func lmHead(in Inputs, sh Shapes) int64 {
	c := &in.Arch
	w := int64(in.WeightBytes)
	V, H := int64(c.VocabSize), int64(c.HiddenSize)
	N := int64(sh.TrainRows * sh.TrainTargets)
	C := int64(in.LMHeadChunk)
	if C <= 0 || C >= V {
		return 3 * N * V * f32
	}
	if in.LoRA.Rank > 0 { // a frozen head: no weight gradient
		return V*H*w + N*C*f32
	}
	return 2*V*H*w + N*C*f32
}

// embeddingLookup is the extra gradient of the embedding when the LM head
// is tied to it: the lookup's gradient, beside the head's.
func embeddingLookup(c *model.Config) int64 {
	if c.TieWordEmbeddings {
		return int64(c.VocabSize) * int64(c.HiddenSize)
	}
	return 0
}

// largestGroup is the parameters of the largest optimizer-update group:
// update_group_layers decoder layers, the embedding (and LM head), or the
// final norm; all of them when update_group_layers is 0.
func largestGroup(in Inputs, emb, perLayer, final int64) int64 {
	g := int64(in.UpdateGroupLayers)
	L := int64(in.Arch.NumHiddenLayers)
	if g == 0 {
		return emb + L*perLayer + final
	}
	return max(emb, min(g, L)*perLayer, final)
}

// largestTensor is the element count of the model's largest weight tensor.
func largestTensor(c *model.Config) int64 {
	V, H, I := int64(c.VocabSize), int64(c.HiddenSize), int64(c.IntermediateSize)
	Q := int64(c.NumAttentionHeads * c.HeadDim)
	return max(V*H, I*H, Q*H)
}

// generation returns a generation batch's two phases: the prefill, which
// holds the KV cache it fills (every layer's keys and values,
// model.GenerationShape's B rows × S slots) and the working set of one
// layer's attention over the prompt tokens (float32 scores, their
// model.dtype copy, the float32 mask) with one layer's hidden states and
// MLP; and a decoding step, which holds the cache and, on a backend that
// does not update it in place, the new cache it writes. Both end with the
// [B, V] float32 logits of the rows' last positions, computed over the LM
// head's chunks and concatenated.
func generation(in Inputs, sh *Shapes) (prefill, decode []Part) {
	c := &in.Arch
	r := in.Rollout
	w := int64(in.WeightBytes)
	B, S := model.GenerationShape(r.Rows, r.PromptTokens, r.NewTokens)
	shared := 0
	if r.Rows > 1 && r.PrefixTokens >= model.MinSharedGenerationPrefix {
		shared = r.PrefixTokens
	}
	T := model.PrefillTokens(r.PromptTokens, shared)
	sh.RolloutRows, sh.RolloutCapacity, sh.RolloutPrefill = B, S, T
	b, s, t := int64(B), int64(S), int64(T)
	L := int64(c.NumHiddenLayers)
	KV := int64(c.NumKeyValueHeads * c.HeadDim)
	H, I, V := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.VocabSize)
	cache := 2 * L * b * s * KV * w
	tq := t // query rows whose scores exist at once: a block of them in a prefill (attention.go)
	if blk := int64(in.AttentionBlock); blk > 0 {
		tq = min(t, blk)
	}
	scores := b * int64(c.NumAttentionHeads) * tq * s
	conv := int64(0)
	if w != f32 {
		conv = w // the scores' model.dtype copy beside the float32 ones
	}
	logits := 2 * b * V * f32 // the LM head's chunks and their concatenation, float32
	widened := int64(0)       // a kept prefix's keys and values copied to the cache's S slots
	if len(in.KeptPrefixes) > 0 {
		widened = 2 * L * s * KV * w
	}
	prefill = []Part{
		{"kv_cache", cache},
		{"kept_prefix_widened", widened},
		{"attention", scores*(f32+conv) + b*t*s*f32}, // the scores of the queries at once, and the [t, s] mask
		{"layer", b * t * (2*H*f32 + 3*I*w)},
		{"logits", logits},
	}
	newCache := cache
	if in.InPlace {
		newCache = 0
	}
	decode = []Part{
		{"kv_cache", cache},
		{"new_kv_cache", newCache},
		{"logits", logits},
	}
	return prefill, decode
}

// trainPhases are the phases of a training step's update (as opposed to
// its generation).
var trainPhases = []string{"backward_head", "backward_layer", "gradients", "update"}

// keptPrefixes is the keys and values of the prefixes the generator keeps:
// 2 · layers · W · KV · w each, W its length rounded up as a prefill rounds
// prompts (model.PrefillTokens).
func keptPrefixes(in Inputs) int64 {
	c := &in.Arch
	var n int64
	for _, tokens := range in.KeptPrefixes {
		n += 2 * int64(c.NumHiddenLayers) * int64(model.PrefillTokens(tokens, 0)) * int64(c.NumKeyValueHeads*c.HeadDim) * int64(in.WeightBytes)
	}
	return n
}
