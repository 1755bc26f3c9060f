package grpo

import "testing"

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
