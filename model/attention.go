package model

// Attention in training graphs over blocks of queries, with its backward written by hand and
// each block's probabilities recomputed there (FlashAttention's scheme, without the fused
// kernel), so that a training step never holds a [B, heads, T, S] tensor: per layer it keeps
// q, k, v, the output and the row log-sum-exps, and in the backward one block's
// [B, heads, Tb, S] at a time. Graphs that are not training graphs (generation, reference
// log-probs) run the same blocks forward only when they have more queries than a block (a
// prefill), the plain softmax otherwise (a decoding step).
//
// For one query block, with S = q·kᵀ·scale + bias, lse = log Σ exp S, P = exp(S − lse),
// O = P·v and the upstream gradient dO:
//
//	δ  = Σ_d dO ⊙ O                 (per query row)
//	dv += Pᵀ·dO,  dP = dO·vᵀ,  dS = P ⊙ (dP − δ),  dq = dS·k·scale,  dk += dSᵀ·q·scale
//
// Model.attentionBlock is the block (model.attention_block; 0 = the plain attention in
// training graphs too).

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// DefaultAttentionBlock is the query rows per block of training graphs' attention unless
// model.attention_block says otherwise.
const DefaultAttentionBlock = 64

// AttentionBlock returns the query rows per block of the attention in training graphs (0 = plain).
func (m *Model) AttentionBlock() int { return m.attentionBlock }

// SetAttentionBlock sets the query rows per block of the attention in training graphs (0 =
// the plain attention). Call it before the first graph is built.
func (m *Model) SetAttentionBlock(n int) { m.attentionBlock = max(n, 0) }

// attention returns softmax(q·kᵀ/√D + bias)·v for q5 [B, T, nkv, rep, D] (query head
// g·rep + r reads KV head g), k, v [B, S, nkv, D] and the additive bias [B, T, S] (float32):
// [B, nkv, T, rep, D] in the model's dtype, with the scores, softmax and statistics in
// float32. Blocked (blockedAttention) in training graphs, plain otherwise.
func (m *Model) attention(training bool, q5, k, v, bias *Node) *Node {
	switch {
	case training && m.attentionBlock > 0:
		return m.blockedAttention(q5, k, v, bias)
	case m.attentionBlock > 0 && q5.Shape().Dimensions[1] > m.attentionBlock:
		// A prefill or a forward of many queries: the blocks one after the other, forward
		// only (not differentiable on the pure-Go backend, which has no gradient of Slice).
		return blockedForward(q5, k, v, bias, m.attentionBlock, m.dtype)
	}
	return plainAttention(q5, k, v, bias, m.dtype)
}

// blockedForward is the attention of blocks of n queries, one after the other: the forward of
// blockedAttention without its gradient.
func blockedForward(q5, k, v, bias *Node, n int, dtype dtypes.DType) *Node {
	var outs []*Node
	var dep *Node
	for _, b := range blockRanges(q5.Shape().Dimensions[1], n) {
		qb := Slice(after(q5, dep), AxisRange(), AxisRange(b[0], b[1]))
		bb := Slice(bias, AxisRange(), AxisRange(b[0], b[1]))
		o, lse := attentionBlockForward(qb, k, v, bb, dtype)
		outs, dep = append(outs, o), lse
	}
	return Concatenate(outs, 2) // [B, nkv, T, rep, D]
}

// plainAttention is the whole softmax at once.
func plainAttention(q5, k, v, bias *Node, dtype dtypes.DType) *Node {
	B, T, D := q5.Shape().Dimensions[0], q5.Shape().Dimensions[1], q5.Shape().Dimensions[4]
	S := k.Shape().Dimensions[1]
	scores := DotGeneral(q5, []int{4}, []int{0, 2}, k, []int{3}, []int{0, 2}) // [B, nkv, T, rep, S]
	scores = MulScalar(toF32(scores), 1/math.Sqrt(float64(D)))                // scaled, float32
	scores = Add(scores, Reshape(bias, B, 1, T, 1, S))                        // masked
	probs := ConvertDType(Softmax(scores, -1), dtype)                         // [B, nkv, T, rep, S]
	return DotGeneral(probs, []int{4}, []int{0, 1}, v, []int{1}, []int{0, 2}) // [B, nkv, T, rep, D]
}

// blockRanges splits [0, T) into blocks of n rows (the last one shorter).
func blockRanges(T, n int) [][2]int {
	var out [][2]int
	for lo := 0; lo < T; lo += n {
		out = append(out, [2]int{lo, min(lo+n, T)})
	}
	return out
}

// attentionBlockForward returns one query block's output O [B, nkv, Tb, rep, D] (model
// dtype) and row log-sum-exps [B, nkv, Tb, rep] (float32) for qb [B, Tb, nkv, rep, D] and
// its bias rows bb [B, Tb, S].
func attentionBlockForward(qb, k, v, bb *Node, dtype dtypes.DType) (o, lse *Node) {
	B, Tb, D := qb.Shape().Dimensions[0], qb.Shape().Dimensions[1], qb.Shape().Dimensions[4]
	S := k.Shape().Dimensions[1]
	s := DotGeneral(qb, []int{4}, []int{0, 2}, k, []int{3}, []int{0, 2}) // [B, nkv, Tb, rep, S]
	s = Add(MulScalar(toF32(s), 1/math.Sqrt(float64(D))), Reshape(bb, B, 1, Tb, 1, S))
	mx := ReduceMax(s, -1)                                             // [B, nkv, Tb, rep]
	e := Exp(Sub(s, ExpandDims(mx, -1)))                               // [B, nkv, Tb, rep, S]
	sum := ReduceSum(e, -1)                                            // [B, nkv, Tb, rep]
	p := ConvertDType(Div(e, ExpandDims(sum, -1)), dtype)              // [B, nkv, Tb, rep, S]
	o = DotGeneral(p, []int{4}, []int{0, 1}, v, []int{1}, []int{0, 2}) // [B, nkv, Tb, rep, D]
	return o, Add(Log(sum), mx)
}

// blockedAttention is attention over query blocks of Model.attentionBlock rows, its
// gradient with respect to q5, k and v computed block by block (attentionBackward) and
// attached through an identity with a custom gradient on q, k and v packed together.
func (m *Model) blockedAttention(q5, k, v, bias *Node) *Node {
	g := q5.Graph()
	dims := q5.Shape().Dimensions
	B, T, nkv, rep, D := dims[0], dims[1], dims[2], dims[3], dims[4]
	qs, ks, vs := StopGradient(q5), StopGradient(k), StopGradient(v)
	blocks := blockRanges(T, m.attentionBlock)

	// Forward: the blocks one after the other (after: a data dependency on the previous).
	var outs, lses []*Node
	var dep *Node
	for _, b := range blocks {
		qb := Slice(after(qs, dep), AxisRange(), AxisRange(b[0], b[1]))
		bb := Slice(bias, AxisRange(), AxisRange(b[0], b[1]))
		o, lse := attentionBlockForward(qb, ks, vs, bb, m.dtype)
		outs, lses, dep = append(outs, o), append(lses, lse), lse
	}
	out, lse := outs[0], lses[0]
	if len(blocks) > 1 {
		out, lse = Concatenate(outs, 2), Concatenate(lses, 2) // [B, nkv, T, rep, D], [B, nkv, T, rep]
	}

	// The gradient: x packs q, k and v (flattened); the identity on x receives the output's
	// upstream gradient through probe (the first |q| entries of x, shaped like the output's
	// [B, T, nkv, rep, D]) and returns [dq, dk, dv] flattened.
	nq, nk := q5.Shape().Size(), k.Shape().Size()
	x := Concatenate([]*Node{Reshape(q5, nq), Reshape(k, nk), Reshape(v, nk)}, 0)
	outStop, lseStop := StopGradient(out), StopGradient(lse)
	xi := IdentityWithCustomGradient(x, func(_, up *Node) *Node {
		dO := Slice(up, AxisRange(0, nq))                                    // [nq] = [B, T, nkv, rep, D] flattened
		dO = TransposeAllAxes(Reshape(dO, B, T, nkv, rep, D), 0, 2, 1, 3, 4) // [B, nkv, T, rep, D]
		dq, dk, dv := m.attentionBackward(qs, ks, vs, bias, outStop, lseStop, dO, blocks)
		return Concatenate([]*Node{Reshape(dq, nq), Reshape(dk, nk), Reshape(dv, nk)}, 0)
	})
	idx := Iota(g, shapes.Make(dtypes.Int32, nq, 1), 0)
	probe := Reshape(Gather(xi, idx), B, T, nkv, rep, D)
	probe = TransposeAllAxes(probe, 0, 2, 1, 3, 4) // [B, nkv, T, rep, D], like out
	return Add(outStop, Sub(probe, StopGradient(probe)))
}

// attentionBackward returns dq [B, T, nkv, rep, D] and dk, dv [B, S, nkv, D] for the
// upstream gradient dO [B, nkv, T, rep, D] of blockedAttention's output (this file's
// equations), a block of queries at a time.
func (m *Model) attentionBackward(q5, k, v, bias, out, lse, dO *Node, blocks [][2]int) (dq, dk, dv *Node) {
	dims := q5.Shape().Dimensions
	B, D := dims[0], dims[4]
	S := k.Shape().Dimensions[1]
	dt := m.dtype
	scale := 1 / math.Sqrt(float64(D))
	delta := ReduceSum(Mul(toF32(dO), toF32(out)), -1) // [B, nkv, T, rep]
	var dqs []*Node
	var dep *Node
	for _, b := range blocks {
		Tb := b[1] - b[0]
		qb := Slice(after(q5, dep), AxisRange(), AxisRange(b[0], b[1]))      // [B, Tb, nkv, rep, D]
		bb := Slice(bias, AxisRange(), AxisRange(b[0], b[1]))                // [B, Tb, S]
		dOb := Slice(dO, AxisRange(), AxisRange(), AxisRange(b[0], b[1]))    // [B, nkv, Tb, rep, D]
		lb := Slice(lse, AxisRange(), AxisRange(), AxisRange(b[0], b[1]))    // [B, nkv, Tb, rep]
		db := Slice(delta, AxisRange(), AxisRange(), AxisRange(b[0], b[1]))  // [B, nkv, Tb, rep]
		s := DotGeneral(qb, []int{4}, []int{0, 2}, k, []int{3}, []int{0, 2}) // [B, nkv, Tb, rep, S]
		s = Add(MulScalar(toF32(s), scale), Reshape(bb, B, 1, Tb, 1, S))
		p := Exp(Sub(s, ExpandDims(lb, -1))) // [B, nkv, Tb, rep, S] float32
		dOc := ConvertDType(dOb, dt)
		// dv += Pᵀ·dO: contract the block's queries (Tb, rep); batch B, nkv.
		dvb := DotGeneral(ConvertDType(p, dt), []int{2, 3}, []int{0, 1}, dOc, []int{2, 3}, []int{0, 1}) // [B, nkv, S, D]
		dP := toF32(DotGeneral(dOc, []int{4}, []int{0, 1}, v, []int{3}, []int{0, 2}))                   // [B, nkv, Tb, rep, S]
		dS := ConvertDType(Mul(p, Sub(dP, ExpandDims(db, -1))), dt)                                     // [B, nkv, Tb, rep, S]
		dqb := MulScalar(DotGeneral(dS, []int{4}, []int{0, 1}, k, []int{1}, []int{0, 2}), scale)        // [B, nkv, Tb, rep, D]
		dkb := MulScalar(DotGeneral(dS, []int{2, 3}, []int{0, 1}, qb, []int{1, 3}, []int{0, 2}), scale) // [B, nkv, S, D]
		if dk == nil {
			dk, dv = toF32(dkb), toF32(dvb)
		} else {
			dk, dv = Add(dk, toF32(dkb)), Add(dv, toF32(dvb))
		}
		dqs = append(dqs, dqb)
		dep = dk
	}
	dq = dqs[0]
	if len(dqs) > 1 {
		dq = Concatenate(dqs, 2) // [B, nkv, T, rep, D]
	}
	dq = TransposeAllAxes(dq, 0, 2, 1, 3, 4)                // [B, T, nkv, rep, D]
	dk = ConvertDType(TransposeAllAxes(dk, 0, 2, 1, 3), dt) // [B, S, nkv, D]
	dv = ConvertDType(TransposeAllAxes(dv, 0, 2, 1, 3), dt) // [B, S, nkv, D]
	return ConvertDType(dq, dt), dk, dv
}
