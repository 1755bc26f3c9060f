package grpo

// The diagnostics of an optimizer step, overall and per phase.

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// Stats are the diagnostics of one optimizer step.
type Stats struct {
	Step      int     // optimizer steps taken, this one included
	LR        float64 // learning rate of this step
	Loss      float64 // the full-batch loss
	GradNorm  float64 // global gradient norm before clipping
	Sequences int     // sequences with at least one counted token
	Tokens    int     // counted completion tokens
	ClipFrac  float64 // fraction of counted tokens whose clipped term was the active one
	MeanRatio float64 // mean ρ = π_θ/π_old over counted tokens
	MeanKL    float64 // mean k3 KL to the reference over counted tokens (0 without reference log-probs)
	Entropy   float64 // mean −log π_θ of the counted (sampled) tokens: a Monte-Carlo estimate of the entropy
	Phase     [NumPhases]PhaseStats

	// With a rollout correction, over the counted tokens that ran (0 without):
	RolloutWeightMean float64 // mean weight c
	RolloutWeightMax  float64 // largest weight c
	RolloutMasked     float64 // fraction of tokens whose weight is 0
	RolloutKL         float64 // mean of r_k − 1 − log r_k, r_k = π_old/π_rollout: an estimate of KL(π_rollout ‖ π_old) per token

	Terms *TokenTerms // each token's terms, with Trainer.SetRecordTokens; nil otherwise
}

// TokenTerms are one optimizer step's per-token values, by row of the step's batch, such that
// the step's loss is Σ_b Weight[b] Σ_k LossMask[b][k] LossTerm[b][k].
type TokenTerms struct {
	LogP     [][]float32 // [B][K] log π_θ at TargetPos, before the step (0 where LossMask is 0)
	LossTerm [][]float32 // [B][K] ℓ_k before aggregation (0 where LossMask is 0)
	Weight   []float64   // [B] 1/(N_seq max(1, Σ_k m)) (seq-mean-token-mean) or 1/N_tok (token-mean); 0 for a sequence without a counted token
}

// newTokenTerms returns the TokenTerms of batch b with its weights set: denom is N_seq or N_tok.
func newTokenTerms(b *Batch, seqTokens []int, denom float64, agg string) *TokenTerms {
	tt := &TokenTerms{LogP: make([][]float32, b.Len()), LossTerm: make([][]float32, b.Len()), Weight: make([]float64, b.Len())}
	for i, n := range seqTokens {
		if n == 0 {
			continue
		}
		tt.Weight[i] = 1 / denom
		if agg == AggSeqMeanTokenMean {
			tt.Weight[i] /= float64(n)
		}
	}
	return tt
}

// fill copies the log-probs and loss terms of a micro-batch ([R, K] tensors) into the rows of tt.
func (tt *TokenTerms) fill(b *Batch, rows []int, logp, lossTerm *tensors.Tensor) {
	mbK := logp.Shape().Dim(1)
	lp, lt := tensors.MustCopyFlatData[float32](logp), tensors.MustCopyFlatData[float32](lossTerm)
	for r, i := range rows {
		K := len(b.LossMask[i])
		tt.LogP[i], tt.LossTerm[i] = make([]float32, K), make([]float32, K)
		for k := range min(K, mbK) {
			if b.LossMask[i][k] != 0 {
				tt.LogP[i][k], tt.LossTerm[i][k] = lp[r*mbK+k], lt[r*mbK+k]
			}
		}
	}
}

// PhaseStats are the diagnostics of one phase's sequences in a step.
type PhaseStats struct {
	Sequences     int
	Tokens        int
	MeanReward    float64 // mean of Batch.Rewards (0 when not given)
	MeanAdvantage float64
	ClipFrac      float64
	MeanRatio     float64
	MeanKL        float64
	Entropy       float64 // mean −log π_θ of the phase's counted tokens
}

// String renders the stats as one log line.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d lr %.3g loss %.4f grad_norm %.4f seqs %d tokens %d clip %.3f ratio %.4f kl %.4g entropy %.3f",
		s.Step, s.LR, s.Loss, s.GradNorm, s.Sequences, s.Tokens, s.ClipFrac, s.MeanRatio, s.MeanKL, s.Entropy)
	for p := range NumPhases {
		ps := s.Phase[p]
		if ps.Sequences > 0 {
			fmt.Fprintf(&b, " | %s reward %.3f seqs %d", Phase(p), ps.MeanReward, ps.Sequences)
		}
	}
	return b.String()
}

// seqDiagnostics are the per-sequence sums a training graph returns (over each sequence's
// counted tokens), in batch order.
type seqDiagnostics struct {
	ratio, kl, clipped, negLogP          []float64
	weight, weightMax, masked, rolloutKL []float64 // with a rollout correction only
}

// summarize fills the token means of st, overall and per phase, from the per-sequence sums
// of the sequences that ran and the counted tokens seqTokens of b's sequences (st.Tokens is
// their total). ran lists the rows of b that ran, in the order of seqs; nil = every row. The
// ratio, clip, KL and entropy means are over the tokens of the rows that ran; the counts,
// rewards and advantages over all of b.
func (st *Stats) summarize(b *Batch, seqTokens []int, seqs seqDiagnostics, ran []int) {
	diag := make([]int, b.Len()) // row of b → its index in seqs, or −1
	for i := range diag {
		diag[i] = i
		if ran != nil {
			diag[i] = -1
		}
	}
	for j, i := range ran {
		diag[i] = j
	}
	var ratio, kl, clip, negLogP, ranTokens float64
	var phaseSums [NumPhases]struct{ reward, adv, ratio, kl, clip, negLogP, ranTokens float64 }
	for i := range b.Len() {
		j := diag[i]
		if j >= 0 {
			ratio += seqs.ratio[j]
			kl += seqs.kl[j]
			clip += seqs.clipped[j]
			negLogP += seqs.negLogP[j]
			ranTokens += float64(seqTokens[i])
		}
		if seqTokens[i] == 0 {
			continue
		}
		p := b.Phase[i]
		ps := &st.Phase[p]
		ps.Sequences++
		ps.Tokens += seqTokens[i]
		if b.Rewards != nil {
			phaseSums[p].reward += float64(b.Rewards[i])
		}
		phaseSums[p].adv += float64(b.Advantages[i])
		if j >= 0 {
			phaseSums[p].ratio += seqs.ratio[j]
			phaseSums[p].kl += seqs.kl[j]
			phaseSums[p].clip += seqs.clipped[j]
			phaseSums[p].negLogP += seqs.negLogP[j]
			phaseSums[p].ranTokens += float64(seqTokens[i])
		}
	}
	if ranTokens > 0 {
		st.MeanRatio, st.MeanKL, st.ClipFrac, st.Entropy = ratio/ranTokens, kl/ranTokens, clip/ranTokens, negLogP/ranTokens
	}
	if seqs.weight != nil && ranTokens > 0 {
		var w, masked, rkl float64
		for j := range seqs.weight {
			w, masked, rkl = w+seqs.weight[j], masked+seqs.masked[j], rkl+seqs.rolloutKL[j]
			st.RolloutWeightMax = max(st.RolloutWeightMax, seqs.weightMax[j])
		}
		st.RolloutWeightMean, st.RolloutMasked, st.RolloutKL = w/ranTokens, masked/ranTokens, rkl/ranTokens
	}
	for p := range NumPhases {
		ps := &st.Phase[p]
		if ps.Sequences == 0 {
			continue
		}
		s := float64(ps.Sequences)
		ps.MeanReward, ps.MeanAdvantage = phaseSums[p].reward/s, phaseSums[p].adv/s
		if tk := phaseSums[p].ranTokens; tk > 0 {
			ps.MeanRatio, ps.MeanKL, ps.ClipFrac = phaseSums[p].ratio/tk, phaseSums[p].kl/tk, phaseSums[p].clip/tk
			ps.Entropy = phaseSums[p].negLogP / tk
		}
	}
}
