package grpo

// Micro-batches: a rollout batch cut into fixed-row tensors, lengths padded to buckets so a run
// compiles few shapes.

import (
	"math/bits"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// Micro-batches are formed so that the rows of one share a role's system prompt: consecutive
// rows of one phase (train sorts the sequences by phase, then length), at most
// micro_batch_size of them. A micro-batch of n rows runs as a graph of R = n rounded up to a
// power of two (padding rows cost a little compute each, never a wrong number); when its rows
// share at least minSharedPrefix leading tokens and the trainer has a SharedPolicyFn, that
// prefix is computed once for the micro-batch.

// minSharedPrefix is the shortest shared prefix worth a separate prefix computation.
const minSharedPrefix = 16

// chunks splits the rows of b into micro-batches: runs of consecutive rows of one phase, cut
// every micro_batch_size rows.
func (t *Trainer) chunks(b *Batch) [][]int {
	var out [][]int
	for i := range b.Len() {
		last := len(out) - 1
		if last < 0 || len(out[last]) == t.cfg.MicroBatchSize || b.Phase[out[last][0]] != b.Phase[i] {
			out = append(out, nil)
			last++
		}
		out[last] = append(out[last], i)
	}
	return out
}

// rowsFor is the row count R of the graph of a micro-batch of n rows: n rounded up to a power
// of two, at most micro_batch_size.
func (t *Trainer) rowsFor(n int) int {
	return min(t.cfg.MicroBatchSize, 1<<bits.Len(uint(max(n, 1)-1)))
}

// sharedPrefix returns how many leading tokens the rows share, kept short of every row's last
// token and of the position before its first counted target (each row keeps a token of its
// own before the first log-prob it needs); 0 when the trainer does not share prefixes, for a
// single row, or below minSharedPrefix.
func (t *Trainer) sharedPrefix(b *Batch, rows []int) int {
	if !t.cfg.SharedPrefix || t.sharedPolicy == nil || len(rows) < 2 {
		return 0
	}
	first := b.Tokens[rows[0]]
	n := len(first)
	for _, i := range rows {
		n = min(n, rowLength(b, i)-1)
		for k, m := range b.LossMask[i] {
			if m != 0 {
				n = min(n, int(b.TargetPos[i][k])-1)
			}
		}
		for p := range n {
			if b.Tokens[i][p] != first[p] {
				n = p
				break
			}
		}
	}
	if n < minSharedPrefix {
		return 0
	}
	return n
}

// rowLength is the number of tokens of row i (the last position with attn_mask 1, plus one).
func rowLength(b *Batch, i int) int {
	for p := len(b.AttnMask[i]) - 1; p >= 0; p-- {
		if b.AttnMask[i][p] != 0 {
			return p + 1
		}
	}
	return 0
}

// bucket rounds a length up to 8, 16, then steps of a quarter of the power of two below it
// (≤ 25% padding), so a run compiles few distinct shapes.
func bucket(n int) int {
	if n <= 16 {
		if n <= 8 {
			return 8
		}
		return 16
	}
	step := (1 << (bits.Len(uint(n-1)) - 1)) / 4
	return (n + step - 1) / step * step
}

// microBatch holds one micro-batch as tensors of R rows, L and K padded to buckets; with a
// shared prefix of n tokens, the prefix [1, P] and each row's tokens after it.
type microBatch struct {
	R, L, K, P          int
	tokens, attn, pos   *tensors.Tensor // int32 [R, L], [R, L], [R, K]
	mask, adv, old, ref *tensors.Tensor // float32 [R, K], [R], [R, K], [R, K]
	rollout             *tensors.Tensor // float32 [R, K]: the sampler's log-probs; nil without
	prefix, prefixMask  *tensors.Tensor // int32 [1, P]; nil without a shared prefix
}

// shared reports whether the micro-batch has a shared prefix.
func (mb *microBatch) shared() bool { return mb.prefix != nil }

// finalize frees the micro-batch's tensors (on the device too) once they have been used.
func (mb *microBatch) finalize() {
	for _, x := range []*tensors.Tensor{mb.tokens, mb.attn, mb.pos, mb.mask, mb.adv, mb.old, mb.ref, mb.rollout, mb.prefix, mb.prefixMask} {
		if x != nil {
			x.FinalizeAll()
		}
	}
}

// pack lays out the rows of b as a micro-batch of R rows, the first n tokens of every row
// (shared by all, n = 0 for none) as its prefix. L is cut after the last token of its rows
// (after the prefix) and K after their last counted entry, both rounded up by bucket, and P
// is bucket(n). Padding rows hold one token (attn_mask[0] = 1) so that every row stays finite
// in any model; all their entries have loss mask 0 and target position 1.
func pack(b *Batch, rows []int, R, n int, withOld, withRef, withRollout bool) microBatch {
	L, K := 2, 1
	for _, i := range rows {
		L = max(L, rowLength(b, i)-n)
		for k := len(b.LossMask[i]) - 1; k >= 0; k-- {
			if b.LossMask[i][k] != 0 {
				K = max(K, k+1)
				break
			}
		}
	}
	L, K = bucket(L), bucket(K)
	mb := microBatch{R: R, L: L, K: K}
	tokens, attn, pos := make([]int32, R*L), make([]int32, R*L), make([]int32, R*K)
	mask, adv := make([]float32, R*K), make([]float32, R)
	var old, ref, rollout []float32
	if withRollout {
		rollout = make([]float32, R*K)
	}
	if withOld {
		old = make([]float32, R*K)
	}
	if withRef {
		ref = make([]float32, R*K)
	}
	for r := range R {
		attn[r*L] = 1
		for k := range K {
			pos[r*K+k] = 1
		}
		if r >= len(rows) {
			continue
		}
		i := rows[r]
		own := b.Tokens[i][n:]
		m := min(L, len(own))
		copy(tokens[r*L:r*L+m], own[:m])
		copy(attn[r*L:r*L+m], b.AttnMask[i][n:n+m])
		adv[r] = b.Advantages[i]
		for k := range min(K, len(b.LossMask[i])) {
			if b.LossMask[i][k] == 0 {
				continue
			}
			pos[r*K+k], mask[r*K+k] = b.TargetPos[i][k]-int32(n), 1
			if withOld {
				old[r*K+k] = b.OldLogProbs[i][k]
			}
			if withRef {
				ref[r*K+k] = b.RefLogProbs[i][k]
			}
			if withRollout {
				rollout[r*K+k] = b.RolloutLogProbs[i][k]
			}
		}
	}
	mb.tokens = tensors.FromFlatDataAndDimensions(tokens, R, L)
	mb.attn = tensors.FromFlatDataAndDimensions(attn, R, L)
	mb.pos = tensors.FromFlatDataAndDimensions(pos, R, K)
	mb.mask = tensors.FromFlatDataAndDimensions(mask, R, K)
	mb.adv = tensors.FromFlatDataAndDimensions(adv, R)
	if withOld {
		mb.old = tensors.FromFlatDataAndDimensions(old, R, K)
	}
	if withRef {
		mb.ref = tensors.FromFlatDataAndDimensions(ref, R, K)
	}
	if withRollout {
		mb.rollout = tensors.FromFlatDataAndDimensions(rollout, R, K)
	}
	if n > 0 {
		mb.P = bucket(n)
		prefix, pmask := make([]int32, mb.P), make([]int32, mb.P)
		copy(prefix, b.Tokens[rows[0]][:n])
		for p := range n {
			pmask[p] = 1
		}
		mb.prefix = tensors.FromFlatDataAndDimensions(prefix, 1, mb.P)
		mb.prefixMask = tensors.FromFlatDataAndDimensions(pmask, 1, mb.P)
	}
	return mb
}

// rowsOf returns the first n values of a float32 [R] tensor.
func rowsOf(t *tensors.Tensor, n int) []float64 {
	flat := tensors.MustCopyFlatData[float32](t)
	out := make([]float64, n)
	for i := range n {
		out[i] = float64(flat[i])
	}
	return out
}
