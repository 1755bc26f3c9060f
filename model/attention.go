package model

// Attention in training graphs over blocks of queries, with its backward written by hand and
// each block's probabilities recomputed there (FlashAttention's scheme, without the fused
// kernel), so that a training step never holds a [B, heads, T, S] tensor: per layer it keeps
// q, k, v, the output and the row log-sum-exps, and in the backward one block's
// [B, heads, Tb, S] at a time. Graphs that are not training graphs (generation, reference
// log-probs) run the same blocks forward only when they have more queries than a block (a
// prefill) and their scores exceed Model.forwardBlockBytes, the plain softmax otherwise (a
// decoding step, a small prefill).
//
// For one query block, with S = q·kᵀ·scale + bias, lse = log Σ exp S, P = exp(S − lse),
// O = P·v and the upstream gradient dO:
//
//	δ  = Σ_d dO ⊙ O                 (per query row)
//	dv += Pᵀ·dO,  dP = dO·vᵀ,  dS = P ⊙ (dP − δ),  dq = dS·k·scale,  dk += dSᵀ·q·scale
//
// With a causal bias (attnBias.causal) a block of queries reads only the keys up to its last
// query: the later ones are masked, their probabilities exactly 0, so leaving them out changes
// no sum and saves their share of the products and of the passes over the scores (3/8 of them
// for 4 blocks of a causal forward).
//
// Model.attentionBlock is the block (model.attention_block; 0 = the plain attention in
// training graphs too).

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX graph code reads best unqualified
)

// DefaultAttentionBlock is the query rows per block of training graphs' attention unless
// model.attention_block says otherwise.
const DefaultAttentionBlock = 64

// defaultForwardBlockBytes is the size of a forward's float32 [B, heads, T, S] scores above
// which graphs that are not training graphs run the attention in blocks: below it the blocks'
// many small ops cost more time than the scores cost memory (BenchmarkForward's 4 × 256
// tokens: 1 MB per head).
const defaultForwardBlockBytes int64 = 64 << 20

// AttentionBlock returns the query rows per block of the attention in training graphs (0 = plain).
func (m *Model) AttentionBlock() int { return m.attentionBlock }

// SetAttentionBlock sets the query rows per block of the attention in training graphs (0 =
// the plain attention). Call it before the first graph is built.
func (m *Model) SetAttentionBlock(n int) { m.attentionBlock = max(n, 0) }

// forwardBlockLimit is the score size above which forward-only graphs run the attention in
// blocks: Model.forwardBlockBytes, or defaultForwardBlockBytes when that is 0.
func (m *Model) forwardBlockLimit() int64 {
	if m.forwardBlockBytes > 0 {
		return m.forwardBlockBytes
	}
	return defaultForwardBlockBytes
}

// attnBias is the additive attention bias [B, T, S] (float32, 0 = may attend) of T queries
// over S keys. causal says that query t attends to no key after S − T + t (the queries are the
// last T positions of the keys: a causal forward, or rows after a shared prefix), which lets a
// block of queries skip the keys after its last one.
type attnBias struct {
	bias   *Node
	causal bool
}

// keyLimit returns how many keys the queries [lo, hi) of T may attend to, out of S.
func (a attnBias) keyLimit(hi, T, S int) int {
	if !a.causal {
		return S
	}
	return min(S, S-T+hi)
}

// attention returns softmax(q·kᵀ/√D + bias)·v for q5 [B, T, nkv, rep, D] (query head
// g·rep + r reads KV head g), k, v [B, S, nkv, D] and the bias: [B, T, nkv, rep, D] (q5's
// layout) in the model's dtype, with the softmax and its statistics in float32. Blocked
// (blockedAttention) in training graphs, plain otherwise.
func (m *Model) attention(training bool, q5, k, v *Node, bias attnBias) *Node {
	switch {
	case training && m.attentionBlock > 0:
		return m.blockedAttention(q5, k, v, bias)
	case m.attentionBlock > 0 && q5.Shape().Dimensions[1] > m.attentionBlock && scoreBytes(q5, k) > m.forwardBlockLimit():
		// A prefill or a forward of many queries whose scores are large: the blocks one after
		// the other, forward only (not differentiable on the pure-Go backend, which has no
		// gradient of Slice: a graph that takes gradients must be a training graph).
		out, _ := m.blocksForward(scaledQuery(q5, m.dtype), k, v, bias)
		return out
	}
	return m.plainAttention(q5, k, v, bias)
}

// scoreBytes is the size of the float32 scores of q5 [B, T, nkv, rep, D] against k [B, S, nkv, D].
func scoreBytes(q5, k *Node) int64 {
	d := q5.Shape().Dimensions
	return int64(d[0]) * int64(d[1]) * int64(d[2]) * int64(d[3]) * int64(k.Shape().Dimensions[1]) * 4
}

// attentionScale is 1/√D.
func attentionScale(D int) float64 { return 1 / math.Sqrt(float64(D)) }

// scaledQuery returns q5·(1/√D) when the model computes in float32, where scaling the queries
// (D values per row) instead of the scores (S per row) costs one rounding of float32, and q5
// itself otherwise (scores scales the bfloat16 products' scores in float32).
func scaledQuery(q5 *Node, dtype dtypes.DType) *Node {
	if dtype != dtypes.Float32 {
		return q5
	}
	return MulScalar(q5, attentionScale(q5.Shape().Dimensions[4]))
}

// scores returns q·kᵀ (scaled by 1/√D unless scaledQuery scaled q) plus the bias rows bb
// [B, Tq, Sk], in float32, for q [B, Tq, nkv, rep, D] (scaledQuery's) and k [B, Sk, nkv, D]:
// [B, nkv, Tq, rep, Sk].
func scores(q, k, bb *Node, D int) *Node {
	B, Tq := q.Shape().Dimensions[0], q.Shape().Dimensions[1]
	Sk := k.Shape().Dimensions[1]
	s := DotGeneral(q, []int{4}, []int{0, 2}, k, []int{3}, []int{0, 2}) // [B, nkv, Tq, rep, Sk]
	if q.DType() != dtypes.Float32 {
		s = MulScalar(toF32(s), attentionScale(D))
	}
	return Add(s, Reshape(bb, B, 1, Tq, 1, Sk))
}

// plainAttention is the whole softmax at once.
func (m *Model) plainAttention(q5, k, v *Node, bias attnBias) *Node {
	D := q5.Shape().Dimensions[4]
	s := scores(scaledQuery(q5, m.dtype), k, bias.bias, D)                    // [B, nkv, T, rep, S]
	probs := ConvertDType(Softmax(s, -1), m.dtype)                            // [B, nkv, T, rep, S]
	out := DotGeneral(probs, []int{4}, []int{0, 1}, v, []int{1}, []int{0, 2}) // [B, nkv, T, rep, D]
	return TransposeAllAxes(out, 0, 2, 1, 3, 4)                               // [B, T, nkv, rep, D]
}

// blockRanges splits [0, T) into blocks of n rows (the last one shorter).
func blockRanges(T, n int) [][2]int {
	var out [][2]int
	for lo := 0; lo < T; lo += n {
		out = append(out, [2]int{lo, min(lo+n, T)})
	}
	return out
}

// keysUpTo returns the first n keys (or values) of k [B, S, nkv, D]: k itself when n = S.
func keysUpTo(k *Node, n int) *Node {
	if n == k.Shape().Dimensions[1] {
		return k
	}
	return Slice(k, AxisRange(), AxisRange(0, n))
}

// blocksForward runs the attention of Model.attentionBlock queries at a time, one block after
// the other, for qs (scaledQuery's) [B, T, nkv, rep, D], k, v [B, S, nkv, D]: the output
// [B, T, nkv, rep, D] and the row log-sum-exps [B, nkv, T, rep] (float32).
func (m *Model) blocksForward(qs, k, v *Node, bias attnBias) (out, lse *Node) {
	dims := qs.Shape().Dimensions
	T, D := dims[1], dims[4]
	S := k.Shape().Dimensions[1]
	var outs, lses []*Node
	var dep *Node
	for _, b := range blockRanges(T, m.attentionBlock) {
		kl := bias.keyLimit(b[1], T, S)
		qb := after(Slice(qs, AxisRange(), AxisRange(b[0], b[1])), dep) // after: a data dependency on the previous block
		bb := Slice(bias.bias, AxisRange(), AxisRange(b[0], b[1]), AxisRange(0, kl))
		s := scores(qb, keysUpTo(k, kl), bb, D)                                           // [B, nkv, Tb, rep, kl]
		mx := ReduceMax(s, -1)                                                            // [B, nkv, Tb, rep]
		e := Exp(Sub(s, ExpandDims(mx, -1)))                                              // [B, nkv, Tb, rep, kl]
		sum := ReduceSum(e, -1)                                                           // [B, nkv, Tb, rep]
		p := ConvertDType(Div(e, ExpandDims(sum, -1)), m.dtype)                           // [B, nkv, Tb, rep, kl]
		o := DotGeneral(p, []int{4}, []int{0, 1}, keysUpTo(v, kl), []int{1}, []int{0, 2}) // [B, nkv, Tb, rep, D]
		l := Add(Log(sum), mx)
		outs, lses, dep = append(outs, o), append(lses, l), l
	}
	out, lse = outs[0], lses[0]
	if len(outs) > 1 {
		out, lse = Concatenate(outs, 2), Concatenate(lses, 2) // [B, nkv, T, rep, D], [B, nkv, T, rep]
	}
	return TransposeAllAxes(out, 0, 2, 1, 3, 4), lse
}

// blockedAttention is attention over query blocks of Model.attentionBlock rows, its gradient
// with respect to q5, k and v computed block by block (attentionBackward).
//
// The output is read through StopGradient (stopping q, k and v instead would copy them: on the
// pure-Go backend an Identity copies an input that has other uses); the gradient reaches q, k
// and v through three identities with custom gradients. q's identity enters the output as
// qi − StopGradient(qi), which adds 0 and hands it the output's upstream gradient dO (q5's
// layout is the output's); its gradient function computes dq, dk and dv at once. k's and v's
// identities enter as a scalar 0 (zeroOf), and their gradient functions return the dk and dv
// that q's computed: GoMLX's Gradient visits nodes from the last built to the first, and q's
// identity is built after theirs.
func (m *Model) blockedAttention(q5, k, v *Node, bias attnBias) *Node {
	qs := scaledQuery(q5, m.dtype)
	out, lse := m.blocksForward(qs, k, v, bias) // [B, T, nkv, rep, D], [B, nkv, T, rep]

	var dk, dv *Node // set by q's gradient function, read by k's and v's
	stashed := func(d **Node) func(_, _ *Node) *Node {
		return func(_, _ *Node) *Node {
			if *d == nil {
				panic("model: blocked attention: the gradient of k or v was asked before q's (GoMLX's Gradient visits nodes from the last to the first)")
			}
			return *d
		}
	}
	ki := IdentityWithCustomGradient(k, stashed(&dk))
	vi := IdentityWithCustomGradient(v, stashed(&dv))
	qi := IdentityWithCustomGradient(q5, func(_, dO *Node) *Node {
		var dq *Node
		dq, dk, dv = m.attentionBackward(qs, k, v, bias, out, lse, dO)
		return dq
	})
	zero := Add(zeroOf(ki), zeroOf(vi)) // a scalar 0 through which k's and v's identities get a gradient
	return Add(StopGradient(out), Sub(qi, Sub(StopGradient(qi), ConvertDType(zero, qi.DType()))))
}

// zeroOf returns a float32 scalar 0 computed from x, differentiable with respect to x (a
// NaN or infinite sum still gives 0).
func zeroOf(x *Node) *Node {
	s := ReduceAllSum(toF32(x))
	d := Sub(s, StopGradient(s))
	return Where(IsFinite(d), d, ZerosLike(d))
}

// attentionBackward returns dq [B, T, nkv, rep, D] and dk, dv [B, S, nkv, D] (the model's
// dtype) for the upstream gradient dO [B, T, nkv, rep, D] of blockedAttention's output out,
// with the forward's row log-sum-exps lse [B, nkv, T, rep] (this file's equations), a block of
// queries at a time. qs is scaledQuery's.
func (m *Model) attentionBackward(qs, k, v *Node, bias attnBias, out, lse, dO *Node) (dq, dk, dv *Node) {
	dims := qs.Shape().Dimensions
	T, D := dims[1], dims[4]
	S := k.Shape().Dimensions[1]
	dt := m.dtype
	scale := attentionScale(D)
	dO = ConvertDType(dO, dt)
	delta := TransposeAllAxes(ReduceSum(Mul(toF32(dO), toF32(out)), -1), 0, 2, 1, 3) // [B, nkv, T, rep]
	blocks := blockRanges(T, m.attentionBlock)
	var dqs []*Node
	keys := newKeyGrads(blocks, bias, T, S)
	dep := dO // nothing of the backward starts before the gradient arrives
	for _, b := range blocks {
		kl := bias.keyLimit(b[1], T, S)
		qb := after(Slice(qs, AxisRange(), AxisRange(b[0], b[1])), dep) // [B, Tb, nkv, rep, D]
		bb := Slice(bias.bias, AxisRange(), AxisRange(b[0], b[1]), AxisRange(0, kl))
		dOb := Slice(dO, AxisRange(), AxisRange(b[0], b[1]))                // [B, Tb, nkv, rep, D]
		lb := Slice(lse, AxisRange(), AxisRange(), AxisRange(b[0], b[1]))   // [B, nkv, Tb, rep]
		db := Slice(delta, AxisRange(), AxisRange(), AxisRange(b[0], b[1])) // [B, nkv, Tb, rep]
		kb, vb := keysUpTo(k, kl), keysUpTo(v, kl)                          // [B, kl, nkv, D]
		p := Exp(Sub(scores(qb, kb, bb, D), ExpandDims(lb, -1)))            // [B, nkv, Tb, rep, kl] float32
		// dv += Pᵀ·dO: contract the block's queries (Tb, rep); batch B, nkv.
		dvb := DotGeneral(ConvertDType(p, dt), []int{2, 3}, []int{0, 1}, dOb, []int{1, 3}, []int{0, 2}) // [B, nkv, kl, D]
		dP := toF32(DotGeneral(dOb, []int{4}, []int{0, 2}, vb, []int{3}, []int{0, 2}))                  // [B, nkv, Tb, rep, kl]
		dS := ConvertDType(Mul(p, Sub(dP, ExpandDims(db, -1))), dt)                                     // [B, nkv, Tb, rep, kl]
		dqb := MulScalar(DotGeneral(dS, []int{4}, []int{0, 1}, kb, []int{1}, []int{0, 2}), scale)       // [B, nkv, Tb, rep, D]
		dkb := DotGeneral(dS, []int{2, 3}, []int{0, 1}, qb, []int{1, 3}, []int{0, 2})                   // [B, nkv, kl, D]
		if dt != dtypes.Float32 {
			dkb = MulScalar(dkb, scale) // qs is unscaled
		}
		keys.add(dkb, dvb)
		dqs = append(dqs, dqb)
		dep = dqb
	}
	dq = dqs[0]
	if len(dqs) > 1 {
		dq = Concatenate(dqs, 2) // [B, nkv, T, rep, D]
	}
	dk, dv = keys.result(dt)
	return ConvertDType(TransposeAllAxes(dq, 0, 2, 1, 3, 4), dt), dk, dv
}

// keyGrads accumulates the blocks' gradients of the keys and values, [B, nkv, kl, D] for
// block i's kl keys, in float32, per segment of keys: segment j is the keys block j reads
// and block j − 1 does not (all S keys in one segment without a causal bias), and gets a
// share of every block from j on.
type keyGrads struct {
	ends   []int   // segment j is keys [ends[j-1], ends[j])
	dk, dv []*Node // per segment, [B, nkv, len, D]
}

func newKeyGrads(blocks [][2]int, bias attnBias, T, S int) *keyGrads {
	g := &keyGrads{}
	for _, b := range blocks {
		if e := bias.keyLimit(b[1], T, S); len(g.ends) == 0 || e > g.ends[len(g.ends)-1] {
			g.ends = append(g.ends, e)
		}
	}
	g.dk, g.dv = make([]*Node, len(g.ends)), make([]*Node, len(g.ends))
	return g
}

// add adds one block's dk and dv (over its first kl keys) into the segments they cover.
func (g *keyGrads) add(dkb, dvb *Node) {
	kl := dkb.Shape().Dimensions[2]
	lo := 0
	for j, hi := range g.ends {
		if hi > kl {
			break
		}
		part := func(x *Node) *Node {
			if lo == 0 && hi == kl {
				return toF32(x)
			}
			return toF32(Slice(x, AxisRange(), AxisRange(), AxisRange(lo, hi)))
		}
		if g.dk[j] == nil {
			g.dk[j], g.dv[j] = part(dkb), part(dvb)
		} else {
			g.dk[j], g.dv[j] = Add(g.dk[j], part(dkb)), Add(g.dv[j], part(dvb))
		}
		lo = hi
	}
}

// result returns dk and dv [B, S, nkv, D] in dtype dt.
func (g *keyGrads) result(dt dtypes.DType) (dk, dv *Node) {
	join := func(parts []*Node) *Node {
		x := parts[0]
		if len(parts) > 1 {
			x = Concatenate(parts, 2) // [B, nkv, S, D]
		}
		return ConvertDType(TransposeAllAxes(x, 0, 2, 1, 3), dt) // [B, S, nkv, D]
	}
	return join(g.dk), join(g.dv)
}
