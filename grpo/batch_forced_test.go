package grpo

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TestNewBatchTargetsOnlyChosenTokens: forced tokens are neither targets nor
// in the loss; each target position points at its completion token.
func TestNewBatchTargetsOnlyChosenTokens(t *testing.T) {
	seqs := []Sequence{
		{Prompt: []int32{1, 2, 3}, Completion: []int32{40, 41, 42, 43}, Forced: []bool{true, false, true, false}, Phase: PhaseMemory, Advantage: 0.5},
		{Prompt: []int32{7, 8}, Completion: []int32{90, 91}, Forced: []bool{false, true}, Phase: PhaseJudge, Advantage: -1},
	}
	b, err := NewBatch(seqs)
	if err != nil {
		t.Fatal(err)
	}
	// L = 3 + 4 = 7; K = 2 chosen tokens at most.
	wantTokens := [][]int32{{1, 2, 3, 40, 41, 42, 43}, {7, 8, 90, 91, 0, 0, 0}}
	wantAttn := [][]int32{{1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 0, 0, 0}}
	wantPos := [][]int32{{4, 6}, {2, 1}} // memory: tokens 41 (pos 4) and 43 (pos 6); judge: 90 (pos 2), then padding
	wantMask := [][]float32{{1, 1}, {1, 0}}
	for i := range seqs {
		for j := range wantTokens[i] {
			if b.Tokens[i][j] != wantTokens[i][j] || b.AttnMask[i][j] != wantAttn[i][j] {
				t.Fatalf("row %d: tokens %v attn %v", i, b.Tokens[i], b.AttnMask[i])
			}
		}
		for k := range wantPos[i] {
			if b.TargetPos[i][k] != wantPos[i][k] || b.LossMask[i][k] != wantMask[i][k] {
				t.Fatalf("row %d: target_pos %v loss_mask %v, want %v %v", i, b.TargetPos[i], b.LossMask[i], wantPos[i], wantMask[i])
			}
		}
		// A counted target is the position of a chosen completion token.
		for k, p := range b.TargetPos[i] {
			if b.LossMask[i][k] == 1 && seqs[i].Forced[int(p)-len(seqs[i].Prompt)] {
				t.Fatalf("row %d: a forced token is a target", i)
			}
		}
	}
	if b.Advantages[0] != 0.5 || b.Advantages[1] != -1 || b.Phase[1] != PhaseJudge {
		t.Fatalf("advantages %v phases %v", b.Advantages, b.Phase)
	}
}

// TestNewBatchRolloutLogProbs: the sampler's log-probs of the chosen tokens become
// RolloutLogProbs, in the targets' columns; a sequence without them leaves the batch without;
// a count that does not match the completion is an error; a step with a rollout correction
// refuses a batch without them, or with a log-prob above 0.
func TestNewBatchRolloutLogProbs(t *testing.T) {
	seqs := []Sequence{
		{Prompt: []int32{1, 2, 3}, Completion: []int32{4, 5, 6, 7}, Forced: []bool{true, false, true, false},
			LogProbs: []float32{-0.1, -0.2, -0.3, -0.4}, Advantage: 1},
		{Prompt: []int32{7, 2}, Completion: []int32{3, 1}, LogProbs: []float32{-0.5, -0.6}, Advantage: -1},
	}
	b, err := NewBatch(seqs)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.RolloutLogProbs; len(got) != 2 || got[0][0] != -0.2 || got[0][1] != -0.4 || got[1][0] != -0.5 || got[1][1] != -0.6 {
		t.Fatalf("rollout log-probs %v, want [[-0.2 -0.4] [-0.5 -0.6]]", got)
	}
	without := append([]Sequence{}, seqs...)
	without[1].LogProbs = nil
	if b2, err := NewBatch(without); err != nil || b2.RolloutLogProbs != nil {
		t.Fatalf("a sequence without log-probs: %v, %v", b2.RolloutLogProbs, err)
	}
	bad := append([]Sequence{}, seqs...)
	bad[0].LogProbs = bad[0].LogProbs[:3]
	if _, err := NewBatch(bad); err == nil || err.Error() != "grpo: sequence 0 has 4 completion tokens but 3 log-probs" {
		t.Fatalf("a short log-prob list: %v", err)
	}

	cfg := DefaultConfig()
	cfg.Beta, cfg.RolloutCorrection = 0, CorrectionTIS
	ctx := context.New()
	tinyInit(ctx, 1)
	tr, err := NewTrainer(backend(t), ctx, tinyPolicy, cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.RolloutLogProbs[0][1] = 0.5
	if _, err := tr.Step(b); err == nil || !strings.Contains(err.Error(), "sequence 0 token 1: the sampler's log-prob is missing, not finite or above 0") {
		t.Fatalf("a positive log-prob: %v", err)
	}
	b.RolloutLogProbs = nil
	if _, err := tr.Step(b); err == nil || !strings.Contains(err.Error(), "a rollout correction needs the sampler's log-probs for all 2 sequences, got 0 rows") {
		t.Fatalf("no rollout log-probs: %v", err)
	}
	if tr.Steps() != 0 {
		t.Fatalf("a refused batch took a step")
	}
}
