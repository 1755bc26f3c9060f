// Package model is Qwen3 in GoMLX: a Hugging Face checkpoint in and out
// (config.json + safetensors), the forward pass, log-probs of chosen tokens
// for training, and batched generation with a KV cache.
//
// This file holds the whole forward pass of Qwen3ForCausalLM (the decoder-only
// Qwen3 of Hugging Face transformers), readable top to bottom:
//
//	x = embed(tokens)                                   # [B, L, H]
//	for each layer:
//	    h = RMSNorm(x)
//	    q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ (+ biases)          # per head: [B, L, heads, D]
//	    q, k = RoPE(RMSNorm_q(q)), RoPE(RMSNorm_k(k))    # q/k norm per head, before rotary
//	    x = x + softmax(q·kᵀ/√D + causal & padding mask)·v ·Woᵀ   (GQA: query head j reads kv head j / (nq/nkv))
//	    x = x + W_down( silu(W_gate·RMSNorm(x)) ⊙ W_up·RMSNorm(x) )
//	logits = RMSNorm(x)·W_lmᵀ                          # W_lm = W_embed when tied
//
// It honours these config.json fields: vocab_size, hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, head_dim, rms_norm_eps, rope_theta (or
// rope_parameters.rope_theta), tie_word_embeddings, attention_bias. It
// refuses (ParseConfig errors naming the key) rope scaling of any kind,
// partial rotary embeddings, sliding-window attention, activations other than
// SiLU and attention dropout.
//
// Choices forced by GoMLX's pure-Go backend (docs/design.md#backends), all exact:
// RMSNorm is x / Sqrt(mean(x²) + eps) (Rsqrt has no gradient there); RoPE's
// rotate-half is a product with a fixed ±1 permutation matrix (the gradient of
// Slice needs Pad, which is missing); the KV cache is written with
// ScatterSum into zeroed slots (no DynamicUpdateSlice). Weights keep the Hugging
// Face [out, in] layout and products contract on their last axis (5× faster
// for decode-shaped products). On the pure-Go backend, backend.New installs
// faster executors and a matmul-based gradient of DotGeneral
// (internal/simplegofast); this file does not depend on them.
//
// The LM head runs only where logits are needed: at the B×K gathered
// positions in TokenLogProbs, at each row's last position in generation.
//
// Weights are trainable variables of a GoMLX context (Model.Context), one per
// Hugging Face tensor, at the scope spelled by the tensor's name (weights.go).
// With bfloat16 weights the matrix products run in bfloat16 and the
// normalizations, softmaxes and log-probs in float32.
package model

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Model is a Qwen3 causal language model whose weights live in a GoMLX context.
type Model struct {
	cfg     Config
	dtype   dtypes.DType // storage and matmul dtype of the weights: Float32 or BFloat16
	backend backends.Backend
	ctx     *context.Context

	mu      sync.Mutex            // guards the compiled executables below
	logits  *context.Exec         // full logits [B, L, V] (scoring, unchunked)
	score   *context.Exec         // per-position scores over vocabulary chunks (scoreGraph)
	prefill map[int]*context.Exec // per KV-cache capacity
	extend  *context.Exec         // tokens on top of a KV cache: decoding steps, prompts after a shared prefix
	widen   map[int]*context.Exec // per KV-cache capacity: a kept prefix put into a cache (prefixcache.go)

	lmHeadChunk    int // vocabulary rows per chunk of the LM head (lmhead.go); 0 = the whole vocabulary
	attentionBlock int // query rows per block of training graphs' attention (attention.go); 0 = plain
	// Size limits (bytes; 0 = the default) above which forward-only graphs run the attention in
	// blocks (attention.go) and generation computes its logits over the LM head's chunks
	// (kvcache.go). Tests lower them to run those paths on small inputs.
	forwardBlockBytes, generationChunkBytes int64

	lora *adapter // the LoRA adapter on the linear projections (lora.go); nil = none

	sharedPrefills atomic.Int64 // generation batches whose common prompt prefix was prefilled once (tests)
	kept           prefixStore  // static prompt prefixes prefilled once and kept across generations (prefixcache.go)
}

// Config returns a copy of the model's architecture.
func (m *Model) Config() *Config {
	c := m.cfg
	c.EOSTokenIDs = append([]int(nil), m.cfg.EOSTokenIDs...)
	return &c
}

// Context returns the GoMLX context holding the weights as trainable
// variables. Pass it (or any scope of it) to TokenLogProbs inside an Exec.
func (m *Model) Context() *context.Context { return m.ctx }

// Backend returns the backend the model runs on.
func (m *Model) Backend() backends.Backend { return m.backend }

// DType returns the dtype of the weights.
func (m *Model) DType() dtypes.DType { return m.dtype }

// maskValue is added to the scores of keys a query may not attend to.
const maskValue = -1e30

// weight returns the graph value of the variable that holds HF tensor name.
func (m *Model) weight(ctx *context.Context, g *Graph, name string) *Node {
	scope, vname := varPath(name)
	v := ctx.GetVariableByScopeAndName(scope, vname)
	if v == nil {
		panic(fmt.Sprintf("model: variable for tensor %s not in this context: pass Model.Context() or a scope of it", name))
	}
	return v.ValueGraph(g)
}

// linear applies the HF-layout weight [out, in] of name to x [..., in] → [..., out], plus its bias if any,
// plus the LoRA adapter's term when name is adapted (lora.go).
func (m *Model) linear(ctx *context.Context, x *Node, name string) *Node {
	w := m.weight(ctx, x.Graph(), name+".weight")
	y := DotGeneral(x, []int{x.Rank() - 1}, nil, w, []int{1}, nil)    // contract on the last axis of both
	if m.cfg.AttentionBias && strings.Contains(name, ".self_attn.") { // q/k/v/o biases
		b := m.weight(ctx, x.Graph(), name+".bias")
		y = Add(y, ExpandLeftToRank(b, y.Rank()))
	}
	return m.withAdapter(ctx, x, y, name)
}

// rmsNorm is weight ⊙ x / sqrt(mean(x²) + eps) over the last axis, with the statistics in float32.
func rmsNorm(x, weight *Node, eps float64) *Node {
	dt := x.DType()
	x32 := toF32(x)
	meanSq := ReduceAndKeep(Square(x32), ReduceMean, -1)
	y := Div(x32, Sqrt(AddScalar(meanSq, eps)))
	return Mul(ConvertDType(y, dt), ExpandLeftToRank(weight, x.Rank()))
}

func toF32(x *Node) *Node {
	if x.DType() == dtypes.Float32 {
		return x
	}
	return ConvertDType(x, dtypes.Float32)
}

// rope returns cos and sin [B, T, 1, D] for positions [B, T] (int32): the
// angle of pair (i, i+D/2) at position p is p·θ^(-2i/D), in the rotate-half
// layout of Hugging Face.
func (m *Model) rope(positions *Node) (cos, sin *Node) {
	g := positions.Graph()
	D := m.cfg.HeadDim
	freqs := make([]float32, D)
	for i := 0; i < D/2; i++ {
		f := float32(1 / math.Pow(m.cfg.RopeTheta, float64(2*i)/float64(D)))
		freqs[i], freqs[i+D/2] = f, f
	}
	B, T := positions.Shape().Dimensions[0], positions.Shape().Dimensions[1]
	pos := Reshape(ConvertDType(positions, dtypes.Float32), B, T, 1) // [B, T, 1]
	angle := Mul(pos, Reshape(Const(g, freqs), 1, 1, D))             // [B, T, D]
	cos = ConvertDType(Reshape(Cos(angle), B, T, 1, D), m.dtype)     // [B, T, 1, D]
	sin = ConvertDType(Reshape(Sin(angle), B, T, 1, D), m.dtype)     // [B, T, 1, D]
	return cos, sin
}

// rotateHalfMatrix is the [D, D] matrix P with x·P = concat(-x[D/2:], x[:D/2]).
func (m *Model) rotateHalfMatrix(g *Graph) *Node {
	D := m.cfg.HeadDim
	p := make([][]float32, D)
	for i := range p {
		p[i] = make([]float32, D)
	}
	for j := 0; j < D/2; j++ {
		p[j+D/2][j] = -1 // out[j] = -x[j+D/2]
		p[j][j+D/2] = 1  // out[j+D/2] = x[j]
	}
	return ConvertDType(Const(g, p), m.dtype)
}

// applyRope rotates x [B, T, heads, D] with cos, sin [B, T, 1, D].
func (m *Model) applyRope(x, cos, sin *Node) *Node {
	rot := DotGeneral(x, []int{3}, nil, m.rotateHalfMatrix(x.Graph()), []int{0}, nil) // [B, T, heads, D]
	return Add(Mul(x, cos), Mul(rot, sin))
}

// kvHook receives a layer's new keys and values [B, T, nkv, D] and returns
// the keys and values to attend over [B, S, nkv, D]: the same ones for a
// plain forward, the updated cache when decoding.
type kvHook func(layer int, k, v *Node) (*Node, *Node)

// decoderLayer runs layer li on x [B, T, H] with RoPE tables cos, sin
// [B, T, 1, D] and the attention bias [B, T, S] (attention.go).
func (m *Model) decoderLayer(ctx *context.Context, li int, x, cos, sin *Node, bias attnBias, kv kvHook) *Node {
	c := &m.cfg
	B, T := x.Shape().Dimensions[0], x.Shape().Dimensions[1]
	nq, nkv, D := c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim
	rep := nq / nkv
	p := fmt.Sprintf("model.layers.%d.", li)
	g := x.Graph()

	// Attention block: x = x + o_proj(attention(RMSNorm(x))).
	h := rmsNorm(x, m.weight(ctx, g, p+"input_layernorm.weight"), c.RMSNormEps)                        // [B, T, H]
	q := Reshape(m.linear(ctx, h, p+"self_attn.q_proj"), B, T, nq, D)                                  // [B, T, nq, D]
	k := Reshape(m.linear(ctx, h, p+"self_attn.k_proj"), B, T, nkv, D)                                 // [B, T, nkv, D]
	v := Reshape(m.linear(ctx, h, p+"self_attn.v_proj"), B, T, nkv, D)                                 // [B, T, nkv, D]
	q = m.applyRope(rmsNorm(q, m.weight(ctx, g, p+"self_attn.q_norm.weight"), c.RMSNormEps), cos, sin) // [B, T, nq, D]
	k = m.applyRope(rmsNorm(k, m.weight(ctx, g, p+"self_attn.k_norm.weight"), c.RMSNormEps), cos, sin) // [B, T, nkv, D]
	k, v = kv(li, k, v)                                                                                // [B, S, nkv, D]

	// GQA: query head j = g·rep + r reads kv head g; softmax(q·kᵀ/√D + bias)·v (attention.go).
	q5 := Reshape(q, B, T, nkv, rep, D)                   // [B, T, nkv, rep, D]
	att := m.attention(ctx.IsTraining(g), q5, k, v, bias) // [B, T, nkv, rep, D]
	att = Reshape(att, B, T, nq*D)                        // [B, T, nq·D]
	x = Add(x, m.linear(ctx, att, p+"self_attn.o_proj"))  // [B, T, H]

	// MLP block: x = x + down(silu(gate(h)) ⊙ up(h)), h = RMSNorm(x).
	h = rmsNorm(x, m.weight(ctx, g, p+"post_attention_layernorm.weight"), c.RMSNormEps) // [B, T, H]
	gate := m.linear(ctx, h, p+"mlp.gate_proj")                                         // [B, T, I]
	up := m.linear(ctx, h, p+"mlp.up_proj")                                             // [B, T, I]
	act := Mul(Mul(gate, Sigmoid(gate)), up)                                            // silu(gate) ⊙ up
	return Add(x, m.linear(ctx, act, p+"mlp.down_proj"))                                // [B, T, H]
}

// forward runs the decoder on tokens [B, T] at positions [B, T] with
// attention bias [B, T, S] and returns the final-normed hidden states [B, T, H].
func (m *Model) forward(ctx *context.Context, tokens, positions *Node, bias attnBias, kv kvHook) *Node {
	g := tokens.Graph()
	B, T := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
	ids := Reshape(ConvertDType(tokens, dtypes.Int32), B, T, 1)
	x := Gather(m.weight(ctx, g, "model.embed_tokens.weight"), ids) // [B, T, H]
	cos, sin := m.rope(positions)                                   // [B, T, 1, D]
	for li := 0; li < m.cfg.NumHiddenLayers; li++ {
		x = m.decoderLayer(ctx, li, x, cos, sin, bias, kv)
	}
	return rmsNorm(x, m.weight(ctx, g, "model.norm.weight"), m.cfg.RMSNormEps) // [B, T, H]
}

// lmHead maps hidden states [..., H] to float32 logits [..., V].
func (m *Model) lmHead(ctx *context.Context, h *Node) *Node {
	w := m.lmWeight(ctx, h.Graph())                                         // [V, H]
	return toF32(DotGeneral(h, []int{h.Rank() - 1}, nil, w, []int{1}, nil)) // [..., V]
}

func (m *Model) lmWeight(ctx *context.Context, g *Graph) *Node {
	if m.cfg.TieWordEmbeddings {
		return m.weight(ctx, g, "model.embed_tokens.weight")
	}
	return m.weight(ctx, g, "lm_head.weight")
}

// causalBias is the attention bias [B, L, L] of a right-padded batch:
// position t may attend to positions s ≤ t that are tokens (mask [B, L]).
func causalBias(mask *Node) attnBias {
	g := mask.Graph()
	B, L := mask.Shape().Dimensions[0], mask.Shape().Dimensions[1]
	causal := Reshape(LowerTriangular(g, L), 1, L, L)     // [1, L, L]: s ≤ t
	allowed := LogicalAnd(causal, Reshape(mask, B, 1, L)) // [B, L, L]
	return attnBias{bias: Where(allowed, ScalarZero(g, dtypes.Float32), Scalar(g, dtypes.Float32, maskValue)), causal: true}
}

// asBoolMask turns a 0/1 (any integer or float) or bool mask into bool.
func asBoolMask(mask *Node) *Node {
	if mask.DType() == dtypes.Bool {
		return mask
	}
	return NotEqual(mask, ScalarZero(mask.Graph(), mask.DType()))
}

// positionsOf returns positions 0..L-1 for every row: [B, L] int32.
func positionsOf(g *Graph, B, L int) *Node {
	return Iota(g, shapes.Make(dtypes.Int32, B, L), 1)
}

func plainKV(_ int, k, v *Node) (*Node, *Node) { return k, v }

// Hidden returns the final-normed hidden states [B, L, H] of tokens [B, L]
// (right-padded; attnMask [B, L], 1 or true = token).
func (m *Model) Hidden(ctx *context.Context, tokens, attnMask *Node) *Node {
	B, L := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
	mask := asBoolMask(attnMask)
	return m.forward(ctx, tokens, positionsOf(tokens.Graph(), B, L), causalBias(mask), plainKV)
}

// Logits returns float32 logits [B, L, V] at every position (the LM head on
// all B×L positions: for scoring and tests; training wants TokenLogProbs).
func (m *Model) Logits(ctx *context.Context, tokens, attnMask *Node) *Node {
	return m.lmHead(ctx, m.Hidden(ctx, tokens, attnMask))
}

// logSumExp returns lse = log Σᵥ exp(z[…, v]) over the last axis ([…],
// float32), and the shifted exponentials e = exp(z - max) [..., V] with
// their sums [...] for reuse. log_softmax(z)[v] is then z[v] - lse: the one
// formula behind TokenLogProbs and the sampler's log-probs. The full
// [..., V] log-softmax is never materialized (on the pure-Go backend every
// broadcast over the vocabulary is a slow pass).
func logSumExp(z *Node) (lse, e, sumE *Node) {
	zmax := StopGradient(ReduceAndKeep(z, ReduceMax, -1)) // [..., 1]
	e = Exp(Sub(z, zmax))                                 // [..., V]
	sumE = ReduceSum(e, -1)                               // [...]
	lse = Add(Log(sumE), Squeeze(zmax, -1))               // [...]
	return lse, e, sumE
}

// TokenLogProbs returns, for tokens [B, L] (int32, right-padded), attnMask
// [B, L] (bool or 0/1 integers, 1 = token) and targetPos [B, K] (int32
// positions p with 1 ≤ p < L), the [B, K] float32 log-probs
//
//	out[b, k] = log_softmax(logits[b, p-1] / temperature)[tokens[b, p]],  p = targetPos[b, k]
//
// with the LM head applied only at the B×K gathered positions p-1. Padding
// entries of targetPos may repeat a valid position; the caller masks them.
// It is a graph function: call it inside a GoMLX Exec (or a gradient) with
// Model.Context(); the weights are trainable variables of that context.
// temperature must be > 0.
func (m *Model) TokenLogProbs(ctx *context.Context, tokens, attnMask, targetPos *Node, temperature float64) *Node {
	logp, _ := m.tokenLogProbs(ctx, tokens, attnMask, targetPos, temperature, false)
	return logp
}

// TokenLogProbsAndEntropy is TokenLogProbs plus the entropy [B, K] (nats)
// of each of those distributions (softmax(logits[b, p-1] / temperature)).
func (m *Model) TokenLogProbsAndEntropy(ctx *context.Context, tokens, attnMask, targetPos *Node, temperature float64) (logp, entropy *Node) {
	return m.tokenLogProbs(ctx, tokens, attnMask, targetPos, temperature, true)
}

func (m *Model) tokenLogProbs(ctx *context.Context, tokens, attnMask, targetPos *Node, temperature float64, withEntropy bool) (logp, entropy *Node) {
	checkTemperature(temperature)
	tokens = ConvertDType(tokens, dtypes.Int32)
	h := m.Hidden(ctx, tokens, attnMask) // [B, L, H]
	return m.logProbsAt(ctx, h, tokens, targetPos, temperature, withEntropy)
}

func checkTemperature(temperature float64) {
	if !(temperature > 0) {
		panic(fmt.Sprintf("model.TokenLogProbs: temperature must be > 0, got %g", temperature))
	}
}

// logProbsAt applies the LM head to hidden states h [B, L, H] at positions
// targetPos-1 and returns log_softmax(logits / temperature) at the tokens
// [B, L] of targetPos [B, K] (and the entropies when asked).
func (m *Model) logProbsAt(ctx *context.Context, h, tokens, targetPos *Node, temperature float64, withEntropy bool) (logp, entropy *Node) {
	g := h.Graph()
	targetPos = ConvertDType(targetPos, dtypes.Int32)
	B, K := targetPos.Shape().Dimensions[0], targetPos.Shape().Dimensions[1]
	row := Iota(g, shapes.Make(dtypes.Int32, B, K), 0)           // [B, K]: b
	prev := SubScalar(targetPos, 1)                              // [B, K]: p-1
	hs := Gather(h, Stack([]*Node{row, prev}, -1))               // [B, K, H]: only the needed positions
	target := Gather(tokens, Stack([]*Node{row, targetPos}, -1)) // [B, K]: tokens[b, p]
	if m.chunked() {                                             // over vocabulary chunks: no [B, K, V] tensor (lmhead.go)
		H := hs.Shape().Dimensions[2]
		logp, entropy = m.headLogProbs(ctx, Reshape(hs, B*K, H), Reshape(target, B*K), temperature, withEntropy)
		logp = Reshape(logp, B, K)
		if withEntropy {
			entropy = Reshape(entropy, B, K)
		}
		return logp, entropy
	}
	z := m.lmHead(ctx, hs) // [B, K, V] logits / temperature
	if temperature != 1 {  // (a pass over [B, K, V] forward and backward saved at T = 1)
		z = Div(z, Scalar(g, dtypes.Float32, temperature))
	}
	lse, e, sumE := logSumExp(z)                                     // [B, K]
	col := Iota(g, shapes.Make(dtypes.Int32, B, K), 1)               // [B, K]: k
	logp = Sub(Gather(z, Stack([]*Node{row, col, target}, -1)), lse) // [B, K]: z[target] - lse
	if withEntropy {
		entropy = Sub(lse, Div(ReduceSum(Mul(e, z), -1), sumE)) // [B, K]: -Σ p log p = lse - Σ p z
	}
	return logp, entropy
}

// TokenLogProbsShared is TokenLogProbs for B sequences that all start with
// the same tokens: prefix [1, P] (int32, right-padded, prefixMask [1, P]: its
// first n entries are the shared tokens), then each row's own tokens [B, L]
// (right-padded, attnMask [B, L]). It returns the [B, K] log-probs of
// tokens[b, p] for p = targetPos[b, k], positions in the row's own tokens
// (1 ≤ p < L; p - 1 is the position the LM head reads):
//
//	TokenLogProbsShared(prefix, tokens, targetPos) = TokenLogProbs(prefix[:n] ++ tokens, targetPos + n)
//
// The prefix runs once, at batch 1; its keys and values are broadcast to the
// B rows, so in a gradient the prefix's share flows back once, summed over
// the rows. On guard prompts (a ~450-token role prompt shared by a batch of
// ~500-token sequences) that is most of the forward and backward work.
func (m *Model) TokenLogProbsShared(ctx *context.Context, prefix, prefixMask, tokens, attnMask, targetPos *Node, temperature float64) *Node {
	checkTemperature(temperature)
	g := tokens.Graph()
	prefix, tokens = ConvertDType(prefix, dtypes.Int32), ConvertDType(tokens, dtypes.Int32)
	P := prefix.Shape().Dimensions[1]
	pmask := asBoolMask(prefixMask) // [1, P]

	// The prefix, at batch 1: keep each layer's keys and values.
	kv := make([][2]*Node, m.cfg.NumHiddenLayers)
	keep := func(li int, k, v *Node) (*Node, *Node) { kv[li] = [2]*Node{k, v}; return k, v }
	m.forward(ctx, prefix, positionsOf(g, 1, P), causalBias(pmask), keep) // only the keys and values are used

	// The rows at positions n, n+1, …, attending to the prefix's n tokens and causally to their own.
	positions, bias := afterPrefix(pmask, asBoolMask(attnMask)) // [B, L], [B, L, P+L]
	attend := func(li int, k, v *Node) (*Node, *Node) {         // [B, L, nkv, D] → [B, P+L, nkv, D]
		return withPrefixKV(kv[li][0], k), withPrefixKV(kv[li][1], v)
	}
	h := m.forward(ctx, tokens, positions, bias, attend) // [B, L, H]
	logp, _ := m.logProbsAt(ctx, h, tokens, targetPos, temperature, false)
	return logp
}

// afterPrefix returns, for rows [B, L] (mask [B, L] bool) that follow a shared prefix of n
// tokens (pmask [1, P] bool, its first n true), the rows' positions n, n+1, … [B, L] and their
// attention bias [B, L, P+L]: the prefix's n tokens, then causally their own.
func afterPrefix(pmask, mask *Node) (positions *Node, bias attnBias) {
	g := mask.Graph()
	P := pmask.Shape().Dimensions[1]
	B, L := mask.Shape().Dimensions[0], mask.Shape().Dimensions[1]
	n := ReduceSum(ConvertDType(pmask, dtypes.Int32), -1)                                           // [1]
	positions = Add(positionsOf(g, B, L), Reshape(n, 1, 1))                                         // [B, L]
	prefixBias := Where(pmask, ScalarZero(g, dtypes.Float32), Scalar(g, dtypes.Float32, maskValue)) // [1, P]
	prefixBias = BroadcastToDims(Reshape(prefixBias, 1, 1, P), B, L, P)                             // [B, L, P]
	own := causalBias(mask).bias                                                                    // [B, L, L]
	return positions, attnBias{bias: Concatenate([]*Node{prefixBias, own}, -1), causal: true}       // [B, L, P+L]
}

// withPrefixKV puts the prefix's keys or values [1, P, nkv, D], broadcast to the rows, before
// the rows' own [B, L, nkv, D]: [B, P+L, nkv, D].
func withPrefixKV(prefix, own *Node) *Node {
	d := own.Shape().Dimensions
	p := BroadcastToDims(prefix, d[0], prefix.Shape().Dimensions[1], d[2], d[3])
	return Concatenate([]*Node{p, own}, 1)
}
