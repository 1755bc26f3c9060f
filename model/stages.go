package model

// The forward pass split at the decoder layers, for activation checkpointing: the trainer
// runs each stage as a graph of its own — the embedding, each layer, the final norm with the
// LM head — keeps only the hidden states between stages, and in the backward runs each layer
// again from its saved input, taking the gradient of ⟨layer output, cotangent⟩ (grpo's
// checkpoint.go). Chaining the stages computes exactly TokenLogProbs (whole rows) or
// TokenLogProbsShared (rows after a shared prefix).
//
// A stage's state is the hidden states entering the next layer: [x] ([B, L, H]) for whole
// rows, [xp, x] ([1, P, H] and [B, L, H]) for rows after a shared prefix.

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// StageInputs are a micro-batch's inputs that every stage may read: its rows' tokens [B, L]
// (int32) and attention mask [B, L] (1 = token), and, for rows after a shared prefix, the
// prefix [1, P] and its mask [1, P] (nil otherwise).
type StageInputs struct {
	Prefix, PrefixMask, Tokens, AttnMask *Node
}

// NumLayers returns the number of decoder layers: the stages between the embedding and the head.
func (m *Model) NumLayers() int { return m.cfg.NumHiddenLayers }

// StageEmbed returns the first state: the embedded tokens (and prefix).
func (m *Model) StageEmbed(ctx *context.Context, in StageInputs) []*Node {
	embed := func(tokens *Node) *Node {
		B, L := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
		ids := Reshape(ConvertDType(tokens, dtypes.Int32), B, L, 1)
		return Gather(m.weight(ctx, tokens.Graph(), "model.embed_tokens.weight"), ids) // [B, L, H]
	}
	if in.Prefix == nil {
		return []*Node{embed(in.Tokens)}
	}
	return []*Node{embed(in.Prefix), embed(in.Tokens)}
}

// StageLayer runs decoder layer li on a state and returns the next one.
func (m *Model) StageLayer(ctx *context.Context, li int, state []*Node, in StageInputs) []*Node {
	g := in.Tokens.Graph()
	B, L := in.Tokens.Shape().Dimensions[0], in.Tokens.Shape().Dimensions[1]
	mask := asBoolMask(in.AttnMask)
	if in.Prefix == nil {
		cos, sin := m.rope(positionsOf(g, B, L))
		return []*Node{m.decoderLayer(ctx, li, state[0], cos, sin, causalBias(mask), plainKV)}
	}
	xp, x := state[0], state[1]
	pmask := asBoolMask(in.PrefixMask)
	P := pmask.Shape().Dimensions[1]
	var kp, vp *Node
	keep := func(_ int, k, v *Node) (*Node, *Node) { kp, vp = k, v; return k, v }
	cosP, sinP := m.rope(positionsOf(g, 1, P))
	xp = m.decoderLayer(ctx, li, xp, cosP, sinP, causalBias(pmask), keep) // [1, P, H]
	positions, bias := afterPrefix(pmask, mask)
	attend := func(_ int, k, v *Node) (*Node, *Node) { return withPrefixKV(kp, k), withPrefixKV(vp, v) }
	cos, sin := m.rope(positions)
	return []*Node{xp, m.decoderLayer(ctx, li, x, cos, sin, bias, attend)}
}

// StageHead returns the log-probs [B, K] at targetPos (positions in the rows' own tokens) from
// the last state: the final norm, then the LM head at those positions.
func (m *Model) StageHead(ctx *context.Context, state []*Node, in StageInputs, targetPos *Node, temperature float64) *Node {
	checkTemperature(temperature)
	x := state[len(state)-1]
	h := rmsNorm(x, m.weight(ctx, x.Graph(), "model.norm.weight"), m.cfg.RMSNormEps) // [B, L, H]
	logp, _ := m.logProbsAt(ctx, h, ConvertDType(in.Tokens, dtypes.Int32), targetPos, temperature, false)
	return logp
}
