package train

// The calls an SFT step trains on besides its trajectories' teacher-forced
// ones: extra judge pairs and memory changes, and the calls of the
// model's own memories (sft.own_memories).

import (
	"fmt"
	"math/rand/v2"

	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/internal/seed"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/prompt"
	"github.com/mageguard/mageguard/train/teacher"
)

// judgePairs returns the step's extra judge calls (SFTConfig.JudgePairs):
// for each of n attack runs with a label-1 action in their window, drawn
// from (seed, step) alone (shuffled, every run once before any repeats),
// the judge call of one label-1 turn and of one label-0 turn, both drawn
// at random, the label-0 one among the turns after the label-1 one when
// there are any.
func (sft *sftSteps) judgePairs(step, n int) []grpo.Sequence {
	var runs []int
	for i, calls := range sft.judge {
		for _, c := range calls {
			if c.label == 1 {
				runs = append(runs, i)
				break
			}
		}
	}
	rng := rand.New(rand.NewPCG(sft.r.opts.Train.Seed, uint64(step)+0x7a1f))
	var out []grpo.Sequence
	for k := 0; k < n && len(runs) > 0; k++ {
		if k%len(runs) == 0 {
			rng.Shuffle(len(runs), func(a, b int) { runs[a], runs[b] = runs[b], runs[a] })
		}
		i := runs[k%len(runs)]
		var pos, neg, after []int
		for _, c := range sft.judge[i] {
			switch {
			case c.label == 1:
				pos = append(pos, c.seq)
			case len(pos) > 0:
				after = append(after, c.seq)
			default:
				neg = append(neg, c.seq)
			}
		}
		p := pos[rng.IntN(len(pos))]
		out = append(out, sft.seqs[i][p])
		if len(after) > 0 {
			neg = after
		}
		if len(neg) > 0 {
			out = append(out, sft.seqs[i][neg[rng.IntN(len(neg))]])
		}
	}
	return out
}

// memoryChanges returns the step's extra memory calls
// (SFTConfig.MemoryChanges): n of the memory calls whose target changes the
// memory, drawn from (seed, step) alone, distinct while the pool lasts.
func (sft *sftSteps) memoryChanges(step, n int) []grpo.Sequence {
	pool := sft.changes
	if n == 0 || len(pool) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(sft.r.opts.Train.Seed, uint64(step)+0x3c5e))
	var out []grpo.Sequence
	for len(out) < n {
		for _, k := range rng.Perm(len(pool)) {
			if len(out) == n {
				break
			}
			out = append(out, sft.seqs[pool[k].traj][pool[k].seq])
		}
	}
	return out
}

// ownSequences renders the memory and judge calls of pool trajectories idx
// on the model's own memories (SFTConfig.OwnMemories): the guard loop runs
// greedily with the current weights, as eval runs it; each memory call is
// trained on the teacher's correction of the memory it was shown, each
// judge call on the teacher's call on the memory the model wrote. It also
// returns the share of the model's memories, and of its decisions, that
// already were those targets.
func (sft *sftSteps) ownSequences(idx []int, step int) (seqs []grpo.Sequence, memRight, judgeRight float64, err error) {
	corr := sft.teacher.(teacher.Corrector)
	chains, _, err := sft.r.guard.Run(sft.r.episodes(idx), rollout.RunOptions{Chains: 1, Sampling: generate.Sampling{
		Greedy: true, Temperature: 1, TopP: 1, Seed: seed.Mix(sft.r.opts.Train.Seed, uint64(step)),
	}})
	if err != nil {
		return nil, 0, 0, err
	}
	n := 0
	for _, ch := range chains {
		ep, tr := ch.Episode, ch.Episode.Traj
		calls := sft.r.guard.EpisodeCalls(ep, nil)
		prev := ""
		for t, tu := range ch.Turns {
			where := fmt.Sprintf("trajectory %s turn %d", tr.ID, ep.Start+t)
			target, err := corr.Next(tr, ep.Start, ep.Start+t, prev)
			if err != nil {
				return nil, 0, 0, fmt.Errorf("%s: %w", where, err)
			}
			toks, forced, err := sft.r.guard.Completion(rollout.MemoryRole, prompt.ToolCall{Name: prompt.MemoryToolName, Content: target})
			if err != nil {
				return nil, 0, 0, fmt.Errorf("%s: memory: %w", where, err)
			}
			seqs = append(seqs, teacherSequence(calls.Memory(t, prev).Prompt, toks, forced, grpo.PhaseMemory))
			own := tu.MemoryOut
			d, why := corr.JudgeOn(tr, ep.Start+t, own)
			toks, forced, err = sft.r.guard.Completion(rollout.JudgeRole, prompt.ToolCall{Name: prompt.JudgeToolName, Decision: d, Rationale: why})
			if err != nil {
				return nil, 0, 0, fmt.Errorf("%s: decision/rationale: %w", where, err)
			}
			seqs = append(seqs, teacherSequence(calls.Judge(t, own).Prompt, toks, forced, grpo.PhaseJudge))
			if own == target {
				memRight++
			}
			if tu.Decision == d {
				judgeRight++
			}
			n++
			prev = own
		}
	}
	if n > 0 {
		memRight, judgeRight = memRight/float64(n), judgeRight/float64(n)
	}
	return seqs, memRight, judgeRight, nil
}

// teacherSequence is one teacher-forced call with advantage 1 (see SFT).
func teacherSequence(prompt, completion []int, forced []bool, phase grpo.Phase) grpo.Sequence {
	return newSequence(prompt, completion, forced, phase, 1, 0)
}
