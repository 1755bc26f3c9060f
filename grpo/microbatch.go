package grpo

// Micro-batches: a rollout batch cut into fixed-row tensors, lengths padded to buckets so a run
// compiles few shapes.

import (
	"math/bits"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// rowsPerMicroBatch is the fixed number of rows R of every micro-batch graph: micro_batch_size,
// or the batch rounded up to a power of two when it is smaller.
func (t *Trainer) rowsPerMicroBatch(B int) int {
	return min(t.cfg.MicroBatchSize, 1<<bits.Len(uint(max(B, 1)-1)))
}

// chunks splits sequence indices 0..B−1 into consecutive micro-batches.
func (t *Trainer) chunks(B int) [][]int {
	R := t.rowsPerMicroBatch(B)
	var out [][]int
	for start := 0; start < B; start += R {
		rows := make([]int, 0, R)
		for i := start; i < min(B, start+R); i++ {
			rows = append(rows, i)
		}
		out = append(out, rows)
	}
	return out
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

// microBatch holds one micro-batch as tensors of R rows, L and K padded to buckets.
type microBatch struct {
	R, L, K             int
	tokens, attn, pos   *tensors.Tensor // int32 [R, L], [R, L], [R, K]
	mask, adv, old, ref *tensors.Tensor // float32 [R, K], [R], [R, K], [R, K]
}

// finalize frees the micro-batch's tensors (on the device too) once they have been used.
func (mb *microBatch) finalize() {
	for _, x := range []*tensors.Tensor{mb.tokens, mb.attn, mb.pos, mb.mask, mb.adv, mb.old, mb.ref} {
		if x != nil {
			x.FinalizeAll()
		}
	}
}

// pack lays out the rows of b as a micro-batch of R rows. L is cut after the last token of its
// rows and K after their last counted entry, both rounded up by bucket. Padding rows hold one
// token (attn_mask[0] = 1) so that every row stays finite in any model; all their entries have
// loss mask 0 and target position 1.
func pack(b *Batch, rows []int, R int, withOld, withRef bool) microBatch {
	L, K := 2, 1
	for _, i := range rows {
		for p := len(b.AttnMask[i]) - 1; p >= 0; p-- {
			if b.AttnMask[i][p] != 0 {
				L = max(L, p+1)
				break
			}
		}
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
	var old, ref []float32
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
		n := min(L, len(b.Tokens[i]))
		copy(tokens[r*L:r*L+n], b.Tokens[i][:n])
		copy(attn[r*L:r*L+n], b.AttnMask[i][:n])
		adv[r] = b.Advantages[i]
		for k := range min(K, len(b.LossMask[i])) {
			if b.LossMask[i][k] == 0 {
				continue
			}
			pos[r*K+k], mask[r*K+k] = b.TargetPos[i][k], 1
			if withOld {
				old[r*K+k] = b.OldLogProbs[i][k]
			}
			if withRef {
				ref[r*K+k] = b.RefLogProbs[i][k]
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
