package model

// Kept prefixes: the keys and values of a static prompt prefix (a guard
// role's system prompt and tool schema, ~400–475 tokens of a ~450–600-token
// prompt), prefilled once per loaded model and reused by every later
// generation whose prompts start with it — across batches, sessions and
// steps, a batch of one row included (GenerateOptions.KeepPrefix).
//
// A kept prefix is stored at its own width W (its length rounded up as the
// prefill graph rounds prompts), [1, W, nkv, D] per layer, independent of
// any batch's KV capacity S; a batch widens it to [1, S, nkv, D] (zeros
// after W, or cut to S: slots past the prefix hold zeros) and prefills only
// the prompts' tokens after it with the extend graph, as the shared-prefix
// path does after its own batch-1 prefill. The same prefix prefilled at the
// same width gives the same keys and values, so a kept prefix's generation
// equals the one that computed it, bit for bit.
//
// The store holds at most MaxKeptPrefixes prefixes (least recently used
// dropped first) and drops them all when the weights change: it remembers
// the tensor that held each variable's value when the prefixes were
// computed, and every setting of a variable (a training update, a checkpoint
// load, a LoRA merge) puts a new tensor there.

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // GoMLX graph code reads best unqualified
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// MaxKeptPrefixes bounds the prefixes a model keeps: a guard has three
// static prefixes (memory, judge, judge-only); a Qwen3-4B prefix of 512
// slots is ~75 MB in bfloat16.
const MaxKeptPrefixes = 4

// keptPrefix is one prefix's keys and values, [1, W, nkv, D] per layer
// (k₀, v₀, k₁, v₁, …).
type keptPrefix struct {
	tokens  []int
	kv      []*tensors.Tensor
	used    uint64 // the store's clock at its last use
	users   int    // generations using kv now: it is not finalized before they end
	dropped bool   // out of the store: finalize kv when users reaches 0
}

// prefixStore is a model's kept prefixes.
type prefixStore struct {
	mu      sync.Mutex
	weights []*tensors.Tensor // the variables' value tensors the entries were computed with
	entries []*keptPrefix
	clock   uint64

	hits, misses atomic.Int64 // generations that reused a kept prefix, that computed one
}

// PrefixCacheStats returns how many generation batches reused a kept
// prefix (GenerateOptions.KeepPrefix) and how many prefilled one to keep.
func (m *Model) PrefixCacheStats() (hits, misses int64) {
	return m.kept.hits.Load(), m.kept.misses.Load()
}

// DropKeptPrefixes forgets every kept prefix (the next generation with
// KeepPrefix prefills its prefix again). Changed weights drop them by
// themselves; this is for memory or for tests.
func (m *Model) DropKeptPrefixes() {
	m.kept.mu.Lock()
	defer m.kept.mu.Unlock()
	m.kept.dropAll()
}

// dropAll drops every entry (the caller holds mu).
func (ps *prefixStore) dropAll() {
	for _, e := range ps.entries {
		ps.drop(e)
	}
	ps.entries = nil
}

// drop marks e out of the store and finalizes its tensors unless in use.
func (ps *prefixStore) drop(e *keptPrefix) {
	e.dropped = true
	if e.users == 0 {
		for _, t := range e.kv {
			t.FinalizeAll()
		}
		e.kv = nil
	}
}

// weightsChanged reports whether any variable of the model's context holds
// another tensor than when the entries were computed, and remembers the
// current ones (the caller holds mu).
func (ps *prefixStore) weightsChanged(ctx *context.Context) bool {
	changed := false
	i := 0
	for v := range ctx.IterVariables() {
		t, err := v.Value()
		if err != nil {
			t = nil
		}
		if i >= len(ps.weights) || ps.weights[i] != t {
			changed = true
		}
		if i < len(ps.weights) {
			ps.weights[i] = t
		} else {
			ps.weights = append(ps.weights, t)
		}
		i++
	}
	if i != len(ps.weights) {
		changed = true
		ps.weights = ps.weights[:i]
	}
	return changed
}

// acquirePrefix returns the kept keys and values of prefix, prefilling and
// keeping them on a miss; release it with releasePrefix when its tensors
// are no longer read.
func (m *Model) acquirePrefix(prefix []int) (*keptPrefix, error) {
	ps := &m.kept
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.weightsChanged(m.ctx) {
		ps.dropAll()
	}
	ps.clock++
	for _, e := range ps.entries {
		if slices.Equal(e.tokens, prefix) {
			e.used, e.users = ps.clock, e.users+1
			ps.hits.Add(1)
			return e, nil
		}
	}
	W := bucket(len(prefix), minPromptBucket)
	res, err := m.prefillRows([][]int{prefix}, 1, W, 1)
	if err != nil {
		return nil, err
	}
	res[0].FinalizeAll() // the prefix's own next-token logits are not needed
	res[1].FinalizeAll()
	ps.misses.Add(1)
	e := &keptPrefix{tokens: slices.Clone(prefix), kv: res[2:], used: ps.clock, users: 1}
	if len(ps.entries) >= MaxKeptPrefixes {
		lru := 0
		for i, x := range ps.entries {
			if x.used < ps.entries[lru].used {
				lru = i
			}
		}
		ps.drop(ps.entries[lru])
		ps.entries = slices.Delete(ps.entries, lru, lru+1)
	}
	ps.entries = append(ps.entries, e)
	return e, nil
}

// releasePrefix ends a use of e.
func (m *Model) releasePrefix(e *keptPrefix) {
	ps := &m.kept
	ps.mu.Lock()
	defer ps.mu.Unlock()
	e.users--
	if e.dropped {
		ps.drop(e)
	}
}

// widenExec returns the executable that puts a kept prefix's [1, W, nkv, D]
// tensors into a cache of capacity S: [1, S, nkv, D], zeros after W (or the
// first S slots when W > S, past the prefix all zeros).
func (m *Model) widenExec(S int) (*context.Exec, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.widen[S]; ok {
		return e, nil
	}
	e, err := context.NewExec(m.backend, m.ctx, func(_ *context.Context, in []*Node) []*Node {
		out := make([]*Node, len(in))
		for i, x := range in {
			dims := x.Shape().Dimensions // [1, W, nkv, D]
			switch W := dims[1]; {
			case W < S:
				out[i] = Concatenate([]*Node{x, Zeros(x.Graph(), shapes.Make(x.DType(), dims[0], S-W, dims[2], dims[3]))}, 1)
			case W > S:
				out[i] = Slice(x, AxisRange(), AxisRange(0, S))
			default: // not called for: a kept prefix of capacity S is used as it is
				out[i] = x
			}
		}
		return out
	})
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	e.SetMaxCache(unboundedGraphs)
	if m.widen == nil {
		m.widen = map[int]*context.Exec{}
	}
	m.widen[S] = e
	return e, nil
}

// prefillKept prefills a batch whose prompts all start with the C tokens
// of a kept prefix (C ≤ sharedPrefixLen(prompts) = P): the kept keys and
// values widened to capacity S; with several rows that share P − C ≥
// minSharedPrefix more tokens, those at batch 1 on top; then each row's
// remaining tokens (prefillRest). → [z, lse, cache…] as prefillRows
// returns them.
func (m *Model) prefillKept(prompts [][]int, C, P, B, S int, temp float32) ([]*tensors.Tensor, error) {
	e, err := m.acquirePrefix(prompts[0][:C])
	if err != nil {
		return nil, err
	}
	cache := e.kv
	if W := cache[0].Shape().Dimensions[1]; W != S {
		widen, err := m.widenExec(S)
		if err != nil {
			m.releasePrefix(e)
			return nil, err
		}
		args := make([]any, len(cache))
		for i, t := range cache {
			args[i] = t
		}
		cache, err = execRecover(widen, args...)
		m.releasePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("generate: widening a kept prefix: %w", err)
		}
		defer finalizeAll(cache)
	} else {
		defer m.releasePrefix(e)
	}
	start := C
	if len(prompts) > 1 && P-C >= minSharedPrefix {
		shared, err := m.prefillRest([][]int{prompts[0][:P]}, C, 1, temp, cache)
		if err != nil {
			return nil, err
		}
		shared[0].FinalizeAll()
		shared[1].FinalizeAll()
		defer finalizeAll(shared[2:])
		cache, start = shared[2:], P
	}
	return m.prefillRest(prompts, start, B, temp, cache)
}

// finalizeAll frees the tensors' buffers now rather than at garbage
// collection: a generation's caches are large.
func finalizeAll(ts []*tensors.Tensor) {
	for _, t := range ts {
		t.FinalizeAll()
	}
}
