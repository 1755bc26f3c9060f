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
	seqs := groupSequences(group, sc)
	if len(seqs) != 8 {
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
		if len(s.Forced) != len(wantForced) || len(s.Completion) != len(wantForced) {
			t.Errorf("sequence %d: forced flags %v for %d tokens", i, s.Forced, len(s.Completion))
		}
	}
}

// TestMemoryCallsOnly: train.memory_only keeps the memory calls'
// sequences, in order, with their advantages, and no judge call.
func TestMemoryCallsOnly(t *testing.T) {
	seqs := []grpo.Sequence{
		{Phase: grpo.PhaseMemory, Advantage: 1, Prompt: []int32{1}},
		{Phase: grpo.PhaseJudge, Advantage: 2, Prompt: []int32{2}},
		{Phase: grpo.PhaseMemory, Advantage: -1, Prompt: []int32{3}},
		{Phase: grpo.PhaseJudge, Advantage: 0, Prompt: []int32{4}},
	}
	got := memoryCalls(seqs)
	if len(got) != 2 || got[0].Prompt[0] != 1 || got[0].Advantage != 1 || got[1].Prompt[0] != 3 || got[1].Advantage != -1 {
		t.Errorf("memory calls %+v, want sequences 1 and 3", got)
	}
}
