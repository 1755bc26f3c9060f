package model

// The LM head over vocabulary chunks: log-probs, entropies and logits
// computed C vocabulary rows at a time, with a running maximum and
// log-sum-exp, so that no [tokens × vocabulary] tensor is ever held — in
// the forward pass, and in the backward pass, where each chunk's logits are
// recomputed from the hidden states and the chunk of the weight (the
// gradient is written by hand, chunk by chunk, and attached with
// IdentityWithCustomGradient). Liger Kernel's fused linear cross-entropy and
// Apple's Cut Cross-Entropy compute the same quantities this way.
//
// Model.lmHeadChunk picks C (model.lm_head_chunk; 0 = the whole vocabulary
// at once, the plain path of qwen3.go). The chunks run one after the other:
// each one's products take a data dependency on the previous one's result
// (after), or the pure-Go backend's parallel scheduler would start them all
// at once and hold them all.
//
// For hidden states h [N, H], the head weight W [V, H] (the embedding when
// tied), logits z = h·Wᵀ / T and targets t [N]:
//
//	log p_n    = z[n, t_n] − lse_n,         lse_n = log Σ_v exp z[n, v]
//	entropy_n  = lse_n − Σ_v p[n, v] z[n, v]
//	∂/∂z[n, v] = g_n (δ_{v t_n} − p[n, v]) / T   for an upstream gradient g [N] of log p
//	∂/∂h_n     = Σ_v ∂/∂z[n, v] · W_v,   ∂/∂W_v = Σ_n ∂/∂z[n, v] · h_n

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// DefaultLMHeadChunk is the vocabulary rows per chunk of the LM head unless
// model.lm_head_chunk says otherwise.
const DefaultLMHeadChunk = 2048

// SetLMHeadChunk sets the vocabulary rows per chunk of the LM head (0 = the
// whole vocabulary at once). Call it before the first graph is built: a
// compiled graph keeps the chunking it was built with.
func (m *Model) SetLMHeadChunk(n int) { m.lmHeadChunk = max(n, 0) }

// chunks returns the vocabulary ranges [lo, hi) of the LM head's chunks:
// one range when chunking is off or the vocabulary fits in one chunk; the
// last one may be shorter.
func (m *Model) chunks() [][2]int {
	V, C := m.cfg.VocabSize, m.lmHeadChunk
	if C <= 0 || C >= V {
		return [][2]int{{0, V}}
	}
	var out [][2]int
	for lo := 0; lo < V; lo += C {
		out = append(out, [2]int{lo, min(lo+C, V)})
	}
	return out
}

// chunked reports whether the LM head runs in more than one chunk.
func (m *Model) chunked() bool { return len(m.chunks()) > 1 }

// after returns x unchanged, with a data dependency on dep: x + 0, where the
// 0 is computed from dep (whatever dep holds, NaN included).
func after(x, dep *Node) *Node {
	if dep == nil {
		return x
	}
	r := ReduceAllMax(toF32(dep))
	zero := Where(IsFinite(r), ZerosLike(r), ZerosLike(r))
	return Add(x, ConvertDType(zero, x.DType()))
}

// chunkLogits returns z[:, lo:hi] = h·W[lo:hi]ᵀ · invT in float32 for h
// [N, H], the head weight w [V, H] and invT = 1/T (a float32 scalar; nil
// for T = 1).
func chunkLogits(h, w *Node, lo, hi int, invT *Node) *Node {
	wc := Slice(w, AxisRange(lo, hi))                           // [C, H]
	z := toF32(DotGeneral(h, []int{1}, nil, wc, []int{1}, nil)) // [N, C]
	if invT != nil {
		z = Mul(z, invT)
	}
	return z
}

// inverseTemperature is 1/T as a float32 scalar of g (nil for T = 1).
func inverseTemperature(g *Graph, temperature float64) *Node {
	if temperature == 1 {
		return nil
	}
	return Scalar(g, dtypes.Float32, 1/temperature)
}

// headStats holds the running statistics of the chunks seen so far, per row:
// the maximum logit, Σ exp(z − max) and, for entropies, Σ exp(z − max)·z.
type headStats struct {
	max, sum, zsum *Node // [N] float32
}

// add merges chunk z [N, C] into the statistics.
func (s headStats) add(z *Node, withEntropy bool) headStats {
	zmax := ReduceMax(z, -1) // [N]
	e := Exp(Sub(z, ExpandDims(zmax, -1)))
	sum := ReduceSum(e, -1)
	var zsum *Node
	if withEntropy {
		zsum = ReduceSum(Mul(e, z), -1)
	}
	if s.max == nil {
		return headStats{zmax, sum, zsum}
	}
	m := Max(s.max, zmax)
	a, b := Exp(Sub(s.max, m)), Exp(Sub(zmax, m)) // rescale both sides to the new maximum
	out := headStats{max: m, sum: Add(Mul(s.sum, a), Mul(sum, b))}
	if withEntropy {
		out.zsum = Add(Mul(s.zsum, a), Mul(zsum, b))
	}
	return out
}

// lse returns log Σ_v exp z[n, v].
func (s headStats) lse() *Node { return Add(Log(s.sum), s.max) }

// targetLogits returns z[n, t_n] = ⟨h_n, W[t_n]⟩ / T [N] float32 for
// targets t [N] int32: the one logit log p needs, without the others.
func targetLogits(h, w, targets *Node, temperature float64) *Node {
	wt := Gather(w, ExpandDims(targets, -1)) // [N, H]
	z := ReduceSum(toF32(Mul(h, wt)), -1)    // [N]
	if temperature != 1 {
		z = MulScalar(z, 1/temperature)
	}
	return z
}

// headLogProbs returns log_softmax(h·Wᵀ / T)[targets] [N] for h [N, H] and
// targets [N] int32, and (withEntropy) the entropies [N], computed over the
// vocabulary chunks. The log-probs carry their exact gradient with respect
// to h and the head weight, computed chunk by chunk (headBackward); the
// entropies carry none (they are diagnostics).
func (m *Model) headLogProbs(ctx *context.Context, h, targets *Node, temperature float64, withEntropy bool) (logp, entropy *Node) {
	g := h.Graph()
	w := m.lmWeight(ctx, g) // [V, H]
	N := h.Shape().Dimensions[0]
	invT := inverseTemperature(g, temperature)

	// Forward: the running statistics over the chunks, then log p = z_t − lse. The value is
	// read through StopGradient (N values; stopping h and W instead would copy the weight).
	var st headStats
	for _, c := range m.chunks() {
		st = st.add(chunkLogits(after(h, st.max), w, c[0], c[1], invT), withEntropy)
	}
	lse := st.lse()                                             // [N]
	value := Sub(targetLogits(h, w, targets, temperature), lse) // [N]
	if withEntropy {
		entropy = StopGradient(Sub(lse, Div(st.zsum, st.sum)))
	}

	// The gradient: h and W reach the value through identities with custom gradients. h's
	// enters as probe − StopGradient(probe), which adds 0 and hands h's identity the upstream
	// gradient g_n on every column of row n (probe sums each row); its gradient function
	// computes dh and dW at once (headBackward). W's enters as a scalar 0 (zeroOf) and its
	// gradient function returns the dW that h's computed: GoMLX's Gradient visits nodes from
	// the last built to the first, and h's identity is built after W's.
	var dw *Node
	wi := IdentityWithCustomGradient(w, func(_, _ *Node) *Node {
		if dw == nil {
			panic("model: LM head: the gradient of the head weight was asked before the hidden states' (GoMLX's Gradient visits nodes from the last to the first)")
		}
		return dw
	})
	hi := IdentityWithCustomGradient(h, func(_, v *Node) *Node {
		up := toF32(Reshape(Slice(v, AxisRange(), AxisRange(0, 1)), N)) // [N]: g_n, on every column of v
		var dh *Node
		dh, dw = m.headBackward(h, w, targets, lse, up, temperature)
		return dh
	})
	probe := ReduceSum(toF32(hi), -1) // [N]
	logp = Add(StopGradient(value), Sub(probe, Sub(StopGradient(probe), zeroOf(wi))))
	return logp, entropy
}

// headBackward returns the gradients of Σ_n up_n · log p_n with respect to
// h [N, H] and W [V, H] (this file's equations), in their dtypes, recomputing
// each chunk's probabilities exp(z − lse) from h and W:
//
//	dz_c = −up ⊙ p_c / T,  dh = Σ_c dz_c · W_c + up ⊙ W[t] / T,  dW_c = dz_cᵀ · h,  dW[t_n] += up_n h_n / T
func (m *Model) headBackward(h, w, targets, lse, up *Node, temperature float64) (dh, dw *Node) {
	N := h.Shape().Dimensions[0]
	dt := h.DType()
	upT := Reshape(MulScalar(up, 1/temperature), N, 1) // [N, 1]: up / T
	// The target term: +up_n/T at (n, t_n).
	wt := Gather(w, ExpandDims(targets, -1))   // [N, H]
	dh = toF32(Mul(wt, ConvertDType(upT, dt))) // [N, H]
	var dws []*Node
	dep := up // nothing of the backward starts before the gradient arrives
	for _, c := range m.chunks() {
		z := chunkLogits(after(h, dep), w, c[0], c[1], inverseTemperature(h.Graph(), temperature)) // [N, C]
		p := Exp(Sub(z, ExpandDims(lse, -1)))                                                      // [N, C]
		dz := ConvertDType(Mul(p, Neg(upT)), dt)                                                   // [N, C]: −up ⊙ p / T
		wc := Slice(w, AxisRange(c[0], c[1]))                                                      // [C, H]
		dh = Add(dh, toF32(DotGeneral(dz, []int{1}, nil, wc, []int{0}, nil)))                      // [N, H]
		dws = append(dws, DotGeneral(dz, []int{0}, nil, h, []int{0}, nil))                         // [C, H]
		dep = dh
	}
	dw = dws[0]
	if len(dws) > 1 {
		dw = Concatenate(dws, 0) // [V, H]
	}
	// dW[t_n] += up_n h_n / T (a target repeated across rows adds up).
	hu := Mul(h, ConvertDType(upT, dt)) // [N, H]
	dw = ScatterSum(dw, ExpandDims(targets, -1), hu, false, false)
	return ConvertDType(dh, dt), dw
}

// headLogits returns the float32 logits · invT [N, V] of h [N, H] and their
// log-sum-exp [N], a chunk at a time (generation: the sampler needs the
// whole row; invT = 1/T, a float32 scalar, nil for 1).
func (m *Model) headLogits(ctx *context.Context, h, invT *Node) (z, lse *Node) {
	w := m.lmWeight(ctx, h.Graph())
	var st headStats
	var parts []*Node
	for _, c := range m.chunks() {
		zc := chunkLogits(after(h, st.max), w, c[0], c[1], invT)
		st = st.add(zc, false)
		parts = append(parts, zc)
	}
	z = parts[0]
	if len(parts) > 1 {
		z = Concatenate(parts, -1)
	}
	return z, st.lse()
}
