package grpo

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
)

// RecordedBatch is a rollout batch saved for benchmarks and other trainers (the update
// benchmark's fixture, read by grpo's benchmark and scripts/bench_update_torch.py): each
// sequence's tokens (prompt and completion, no padding), the positions whose log-probs count
// with their reference log-probs, its advantage and phase.
type RecordedBatch struct {
	Source      string             `json:"source"`      // where the batch comes from
	Temperature float64            `json:"temperature"` // the sampling temperature its log-probs use
	Sequences   []RecordedSequence `json:"sequences"`
}

// RecordedSequence is one sequence of a RecordedBatch.
type RecordedSequence struct {
	Tokens      []int32   `json:"tokens"`
	TargetPos   []int32   `json:"target_pos"`   // counted positions only
	RefLogProbs []float32 `json:"ref_logprobs"` // at TargetPos; empty without a reference
	Advantage   float32   `json:"advantage"`
	Phase       Phase     `json:"phase"`
}

// Record turns a batch into a RecordedBatch.
func Record(b *Batch, source string, temperature float64) RecordedBatch {
	rec := RecordedBatch{Source: source, Temperature: temperature}
	for i := range b.Len() {
		s := RecordedSequence{Tokens: b.Tokens[i][:rowLength(b, i)], Advantage: b.Advantages[i], Phase: b.Phase[i]}
		for k, m := range b.LossMask[i] {
			if m == 0 {
				continue
			}
			s.TargetPos = append(s.TargetPos, b.TargetPos[i][k])
			if b.RefLogProbs != nil {
				s.RefLogProbs = append(s.RefLogProbs, b.RefLogProbs[i][k])
			}
		}
		rec.Sequences = append(rec.Sequences, s)
	}
	return rec
}

// ReadRecordedBatch reads a gzipped RecordedBatch and lays it out as a Batch.
func ReadRecordedBatch(path string) (*Batch, *RecordedBatch, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	var rec RecordedBatch
	if err := json.NewDecoder(zr).Decode(&rec); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	L, K := 2, 1
	for i, s := range rec.Sequences {
		if len(s.Tokens) == 0 || (len(s.RefLogProbs) != 0 && len(s.RefLogProbs) != len(s.TargetPos)) {
			return nil, nil, fmt.Errorf("%s: sequence %d: %d tokens, %d targets, %d reference log-probs", path, i, len(s.Tokens), len(s.TargetPos), len(s.RefLogProbs))
		}
		for _, p := range s.TargetPos {
			if p < 1 || int(p) >= len(s.Tokens) {
				return nil, nil, fmt.Errorf("%s: sequence %d: target position %d outside [1, %d)", path, i, p, len(s.Tokens))
			}
		}
		L, K = max(L, len(s.Tokens)), max(K, len(s.TargetPos))
	}
	b := &Batch{}
	withRef := len(rec.Sequences) > 0 && len(rec.Sequences[0].RefLogProbs) > 0
	for _, s := range rec.Sequences {
		tokens, attn := make([]int32, L), make([]int32, L)
		copy(tokens, s.Tokens)
		for p := range s.Tokens {
			attn[p] = 1
		}
		pos, mask, ref := make([]int32, K), make([]float32, K), make([]float32, K)
		for k := range K {
			pos[k] = 1
		}
		for k, p := range s.TargetPos {
			pos[k], mask[k] = p, 1
			if withRef {
				ref[k] = s.RefLogProbs[k]
			}
		}
		b.Tokens, b.AttnMask = append(b.Tokens, tokens), append(b.AttnMask, attn)
		b.TargetPos, b.LossMask = append(b.TargetPos, pos), append(b.LossMask, mask)
		b.Advantages, b.Phase = append(b.Advantages, s.Advantage), append(b.Phase, s.Phase)
		if withRef {
			b.RefLogProbs = append(b.RefLogProbs, ref)
		}
	}
	return b, &rec, nil
}
