package model

// The graphs of batched generation, with a fixed-capacity KV cache.
//
// Two compiled graphs: prefill (the right-padded prompts [B, Lp] → log-probs
// at each row's last prompt position and the KV cache [B, S, nkv, D] per
// layer, capacity S) and extend (tokens [B, T] at given positions on top of
// the cache → log-probs and the updated cache; decoding runs it with one
// token per row). Shapes are bucketed — Lp to powers of two, B and S as
// GenerationShape rounds them — so one decoding graph serves every position
// of every generation with the same (B, S), and an Exec never recompiles per
// length. Every row keeps its own
// position: row b writes its t-th new token at slot len_b + t, and attends
// to slots ≤ that position, so rows of different lengths share the batch
// without left-padding and a padded batch equals its rows run alone.
//
// Shared prefix: when the prompts of a batch start with the same tokens (a
// role's system prompt, ~400–475 of a guard prompt's ~450–600), that prefix
// is prefilled once, at batch 1, and its keys and values are broadcast into
// every row's cache; each row then prefills only its own remaining tokens
// (the extend graph: tokens at given positions, written into the cache and
// attending to every slot up to their position — decoding is the same graph
// with one token per row). A static prefix the caller names
// (GenerateOptions.KeepPrefix) is prefilled once and kept across batches
// (prefixcache.go), so that a batch of one row reuses it too.

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// donate hands t's device buffer to the next execution when the backend
// allows it (the cache is then updated in place), else passes t itself.
func donate(t *tensors.Tensor, m *Model) any {
	if t.IsShared() {
		return t
	}
	d, err := DonateTensorBuffer(t, m.backend, 0)
	if err != nil {
		return t
	}
	return d
}

// execRecover runs e, turning panics of graph building into errors.
func execRecover(e *context.Exec, args ...any) (out []*tensors.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return e.Exec(args...)
}

// prefillExec returns the prefill executable for KV capacity S.
func (m *Model) prefillExec(S int) (*context.Exec, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.prefill[S]; ok {
		return e, nil
	}
	e, err := context.NewExec(m.backend, m.ctx, func(ctx *context.Context, in []*Node) []*Node {
		return m.prefillGraph(ctx, in[0], in[1], in[2], in[3], S)
	})
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	e.SetMaxCache(unboundedGraphs)
	if m.prefill == nil {
		m.prefill = map[int]*context.Exec{}
	}
	m.prefill[S] = e
	return e, nil
}

// prefillGraph: tokens [B, Lp] int32, mask [B, Lp] bool, last [B] int32 (each
// row's last prompt position), temperature scalar → [z = logits / T [B, V]
// at last, lse = logsumexp(z) [B], k₀, v₀, k₁, v₁, … each [B, S, nkv, D]].
func (m *Model) prefillGraph(ctx *context.Context, tokens, mask, last, temperature *Node, S int) []*Node {
	g := tokens.Graph()
	B, Lp := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
	nkv, D := m.cfg.NumKeyValueHeads, m.cfg.HeadDim
	cache := make([]*Node, 2*m.cfg.NumHiddenLayers)
	keep := func(li int, k, v *Node) (*Node, *Node) {
		// The cache keeps the prompt's keys and values and zeros elsewhere
		// (padding included): decoding adds each new key/value into a zero slot.
		store := func(x *Node) *Node { // [B, Lp, nkv, D] → [B, S, nkv, D]
			x = Where(mask, x, ZerosLike(x))
			if S == Lp {
				return x
			}
			return Concatenate([]*Node{x, Zeros(g, shapes.Make(x.DType(), B, S-Lp, nkv, D))}, 1)
		}
		cache[2*li], cache[2*li+1] = store(k), store(v)
		return k, v
	}
	h := m.forward(ctx, tokens, positionsOf(g, B, Lp), causalBias(mask), keep) // [B, Lp, H]
	row := Iota(g, shapes.Make(dtypes.Int32, B), 0)
	hLast := Gather(h, Stack([]*Node{row, last}, -1)) // [B, H]
	z, lse := m.lastLogits(ctx, hLast, temperature)   // [B, V] logits / temperature, [B]
	return append([]*Node{z, lse}, cache...)
}

// defaultGenerationChunkBytes is the size of a generation step's float32 [B, V] logits above
// which they are computed over the LM head's vocabulary chunks. The logits are the step's
// output either way, so chunks only save the softmax's temporaries beside them; below this (64
// rows of Qwen3's vocabulary are 39 MB), one product is faster than the chunks' many small ops.
const defaultGenerationChunkBytes int64 = 64 << 20

// generationChunkLimit is Model.generationChunkBytes, or defaultGenerationChunkBytes when that is 0.
func (m *Model) generationChunkLimit() int64 {
	if m.generationChunkBytes > 0 {
		return m.generationChunkBytes
	}
	return defaultGenerationChunkBytes
}

// lastLogits maps the hidden states of the rows being generated, hLast
// [B, H], to their logits / temperature [B, V] (float32) and log-sum-exp
// [B]: over vocabulary chunks (lmhead.go) when the batch's logits exceed
// generationChunkLimit, else at once.
func (m *Model) lastLogits(ctx *context.Context, hLast, temperature *Node) (z, lse *Node) {
	if m.chunked() && int64(hLast.Shape().Dimensions[0])*int64(m.cfg.VocabSize)*4 > m.generationChunkLimit() {
		invT := Inverse(ConvertDType(temperature, dtypes.Float32))
		return m.headLogits(ctx, hLast, invT)
	}
	z = Div(m.lmHead(ctx, hLast), temperature)
	lse, _, _ = logSumExp(z)
	return z, lse
}

// sharedPrefixLen returns the length of the longest common prefix of the
// prompts, short of each prompt's last token (every row prefills at least
// that one: its logits start the generation).
func sharedPrefixLen(prompts [][]int) int {
	if len(prompts) == 0 {
		return 0
	}
	P := len(prompts[0]) - 1
	for _, p := range prompts[1:] {
		P = min(P, len(p)-1)
		for j := 0; j < P; j++ {
			if p[j] != prompts[0][j] {
				P = j
				break
			}
		}
	}
	return max(P, 0)
}

// prefillRows prefills every row's whole prompt (right-padded to a bucket):
// → [z, lse, cache…] as prefillGraph returns them.
func (m *Model) prefillRows(prompts [][]int, B, S int, temp float32) ([]*tensors.Tensor, error) {
	maxLen := 0
	for _, p := range prompts {
		maxLen = max(maxLen, len(p))
	}
	Lp := min(bucket(maxLen, minPromptBucket), S) // S ≥ maxLen: it holds the new tokens too
	tokens := make([][]int32, B)
	mask := make([][]bool, B)
	last := make([]int32, B)
	for b := range tokens {
		tokens[b] = make([]int32, Lp)
		mask[b] = make([]bool, Lp)
		p := []int{0} // filler rows: one token, ignored
		if b < len(prompts) {
			p = prompts[b]
		}
		for j, id := range p {
			tokens[b][j] = int32(id)
			mask[b][j] = true
		}
		last[b] = int32(len(p) - 1)
	}
	prefill, err := m.prefillExec(S)
	if err != nil {
		return nil, err
	}
	res, err := execRecover(prefill, tokens, mask, last, temp)
	if err != nil {
		return nil, fmt.Errorf("generate: prefill: %w", err)
	}
	return res, nil
}

// prefillShared prefills the P tokens every prompt starts with once, at
// batch 1 (the cache [1, S, nkv, D] per layer), then each row's remaining
// tokens (prefillRest): → [z, lse, cache…] as prefillRows returns them.
func (m *Model) prefillShared(prompts [][]int, P, B, S int, temp float32) ([]*tensors.Tensor, error) {
	prefix, err := m.prefillRows([][]int{prompts[0][:P]}, 1, S, temp)
	if err != nil {
		return nil, err
	}
	m.sharedPrefills.Add(1)
	prefix[0].FinalizeAll() // the prefix's own next-token logits are not needed
	prefix[1].FinalizeAll()
	defer finalizeAll(prefix[2:])
	return m.prefillRest(prompts, P, B, temp, prefix[2:])
}

// prefillRest prefills each row's tokens from position start on, on top of
// a cache that holds the first start tokens every prompt shares (k, v per
// layer, [1, S, nkv, D], broadcast to the B rows by the extend graph, which
// writes the rows' keys and values after it; it is read, not changed):
// → [z, lse, cache…] as prefillRows returns them.
func (m *Model) prefillRest(prompts [][]int, start, B int, temp float32, prefix []*tensors.Tensor) ([]*tensors.Tensor, error) {
	maxRest := 0
	for _, p := range prompts {
		maxRest = max(maxRest, len(p)-start)
	}
	T := bucket(maxRest, minPromptBucket)
	tokens, pos, valid := make([][]int32, B), make([][]int32, B), make([][]bool, B)
	last := make([]int32, B)
	for b := range tokens {
		tokens[b], pos[b], valid[b] = make([]int32, T), make([]int32, T), make([]bool, T)
		rest := []int{0} // filler rows: one token at slot 0, ignored
		from := 0
		if b < len(prompts) {
			rest, from = prompts[b][start:], start
		}
		for j, id := range rest {
			tokens[b][j], pos[b][j], valid[b][j] = int32(id), int32(from+j), true
		}
		last[b] = int32(len(rest) - 1)
	}
	extend, err := m.extendExec()
	if err != nil {
		return nil, err
	}
	args := []any{tokens, pos, valid, last, temp}
	for _, t := range prefix {
		args = append(args, t)
	}
	res, err := execRecover(extend, args...)
	if err != nil {
		return nil, fmt.Errorf("generate: prefill after the shared prefix: %w", err)
	}
	return res, nil
}

// extendExec returns the extend executable (compiled per shape bucket).
func (m *Model) extendExec() (*context.Exec, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.extend != nil {
		return m.extend, nil
	}
	e, err := context.NewExec(m.backend, m.ctx, func(ctx *context.Context, in []*Node) []*Node {
		return m.extendGraph(ctx, in[0], in[1], in[2], in[3], in[4], in[5:])
	})
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	e.SetMaxCache(unboundedGraphs)
	m.extend = e
	return e, nil
}

// extendGraph runs tokens [B, T] int32 at positions pos [B, T] int32 (valid
// [B, T] bool: false for padding) on top of a KV cache (k, v per layer,
// [B, S, nkv, D], or [1, S, nkv, D] to be broadcast to the B rows: a shared
// prefix) and returns [z = logits / T [B, V] at each row's token last[b]
// (int32, an index into T), lse [B], the updated cache [B, S, nkv, D]…].
// Token (b, t) adds its key and value (ScatterSum) into slot pos[b, t],
// which holds zeros until then (padding adds zeros into slot 0), and
// attends to slots ≤ pos[b, t]. Decoding is T = 1: only B·nkv·D values per
// layer are written, in place when the cache buffers are donated.
func (m *Model) extendGraph(ctx *context.Context, tokens, pos, valid, last, temperature *Node, cache []*Node) []*Node {
	g := tokens.Graph()
	B, T := tokens.Shape().Dimensions[0], tokens.Shape().Dimensions[1]
	S := cache[0].Shape().Dimensions[1]
	nkv, D := m.cfg.NumKeyValueHeads, m.cfg.HeadDim
	pos = Where(valid, pos, ZerosLike(pos))
	row := Iota(g, shapes.Make(dtypes.Int32, B, T), 0)
	slot := Stack([]*Node{row, pos}, -1) // [B, T, 2]: (b, pos[b, t])
	keep := BroadcastToDims(Reshape(valid, B, T, 1, 1), B, T, nkv, D)
	updated := make([]*Node, len(cache))
	write := func(li int, k, v *Node) (*Node, *Node) { // k, v: [B, T, nkv, D]
		upd := func(x, c *Node) *Node {
			if c.Shape().Dimensions[0] != B {
				c = BroadcastToDims(c, B, S, nkv, D)
			}
			if T > 1 { // padding tokens add zeros
				x = Where(keep, x, ZerosLike(x))
			}
			return ScatterSum(c, slot, x, T == 1, T == 1) // [B, S, nkv, D]
		}
		updated[2*li], updated[2*li+1] = upd(k, cache[2*li]), upd(v, cache[2*li+1])
		return updated[2*li], updated[2*li+1]
	}
	allowed := LessOrEqual(Iota(g, shapes.Make(dtypes.Int32, B, T, S), 2), Reshape(pos, B, T, 1)) // [B, T, S]
	bias := Where(allowed, ScalarZero(g, dtypes.Float32), Scalar(g, dtypes.Float32, maskValue))
	h := m.forward(ctx, tokens, pos, attnBias{bias: bias}, write)                          // [B, T, H]
	hLast := Gather(h, Stack([]*Node{Iota(g, shapes.Make(dtypes.Int32, B), 0), last}, -1)) // [B, H]
	z, lse := m.lastLogits(ctx, hLast, temperature)                                        // [B, V] logits / temperature, [B]
	return append([]*Node{z, lse}, updated...)
}
