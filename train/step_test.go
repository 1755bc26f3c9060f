package train

import (
	"testing"

	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/rewards"
	"github.com/mageguard/mageguard/rollout"
)

// call is a guard call whose prompt and completion encode where it came
// from, so a test can tell every sequence apart.
func call(tag int32, forced ...bool) *rollout.Call {
	c := &rollout.Call{Prompt: []int{int(tag), int(tag) + 1}}
	for i := range forced {
		c.Completion = append(c.Completion, int(tag)+10+i)
	}
	c.Forced = forced
	return c
}

// TestGroupSequencesTakeTheirPhasesAdvantage pins the phase mask in the
// wiring: every memory call's sequence carries the memory advantage of its
// own turn and chain, every judge call's the judge advantage.
func TestGroupSequencesTakeTheirPhasesAdvantage(t *testing.T) {
	// 2 chains × 2 turns; memory tags 100·(c+1)+10·t, judge tags +5.
	var group []*rollout.Chain
	for c := 0; c < 2; c++ {
		ch := &rollout.Chain{Index: c}
		for tt := 0; tt < 2; tt++ {
			tag := int32(100*(c+1) + 10*tt)
			ch.Turns = append(ch.Turns, rollout.Turn{Memory: call(tag, true, false), Judge: *call(tag+5, true, false, true)})
		}
		group = append(group, ch)
	}
	sc := &scored{
		rewards:   rewards.Rewards{Judge: [][]float64{{1, 2}, {3, 4}}, Memory: [][]float64{{5, 6}, {7, 8}}},
		advJudge:  [][]float64{{0.1, 0.2}, {0.3, 0.4}},
		advMemory: [][]float64{{-0.1, -0.2}, {-0.3, -0.4}},
	}
	seqs, forced := groupSequences(group, sc)
	if len(seqs) != 8 || len(forced) != 8 {
		t.Fatalf("%d sequences, want 8", len(seqs))
	}
	for i, s := range seqs {
		tag := s.Prompt[0]
		c, tt := int(tag/100)-1, int(tag%100)/10
		isJudge := tag%10 == 5
		wantPhase, wantAdv, wantReward := grpo.PhaseMemory, sc.advMemory[tt][c], sc.rewards.Memory[tt][c]
		wantForced := group[c].Turns[tt].Memory.Forced
		if isJudge {
			wantPhase, wantAdv, wantReward = grpo.PhaseJudge, sc.advJudge[tt][c], sc.rewards.Judge[tt][c]
			wantForced = group[c].Turns[tt].Judge.Forced
		}
		if s.Phase != wantPhase || s.Advantage != float32(wantAdv) || s.Reward != float32(wantReward) {
			t.Errorf("sequence %d (chain %d turn %d judge %v): phase %v adv %v reward %v, want %v %v %v",
				i, c, tt, isJudge, s.Phase, s.Advantage, s.Reward, wantPhase, wantAdv, wantReward)
		}
		if len(forced[i]) != len(wantForced) || len(s.Completion) != len(wantForced) {
			t.Errorf("sequence %d: forced flags %v for %d tokens", i, forced[i], len(s.Completion))
		}
	}
}

// TestNewBatchTargetsOnlyChosenTokens: forced tokens are neither targets nor
// in the loss; each target position points at its completion token.
func TestNewBatchTargetsOnlyChosenTokens(t *testing.T) {
	seqs := []grpo.Sequence{
		{Prompt: []int32{1, 2, 3}, Completion: []int32{40, 41, 42, 43}, Phase: grpo.PhaseMemory, Advantage: 0.5},
		{Prompt: []int32{7, 8}, Completion: []int32{90, 91}, Phase: grpo.PhaseJudge, Advantage: -1},
	}
	forced := [][]bool{{true, false, true, false}, {false, true}}
	b, err := newBatch(seqs, forced)
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
			if b.LossMask[i][k] == 1 && forced[i][int(p)-len(seqs[i].Prompt)] {
				t.Fatalf("row %d: a forced token is a target", i)
			}
		}
	}
	if b.Advantages[0] != 0.5 || b.Advantages[1] != -1 || b.Phase[1] != grpo.PhaseJudge {
		t.Fatalf("advantages %v phases %v", b.Advantages, b.Phase)
	}
}
