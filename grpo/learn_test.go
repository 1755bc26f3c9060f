package grpo

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"
)

// The learning tests: sequences are rewarded for what their sampled completion holds, and the
// tiny model must learn it with the trainer.
const (
	tokMemoryPrompt = 1 // the memory phase's prompt
	tokJudgePrompt  = 2 // the judge phase's prompt
	tokA            = 5
	tokB            = 6
	completionLen   = 3
	groups          = 4 // prompts per phase and step
	chains          = 8 // G
)

// learnSetup is one learning experiment.
type learnSetup struct {
	twoPhases  bool // (b): a judge phase with the opposite target
	brokenMask bool // (c): every sequence takes its chain's memory advantage
	steps      int  // upper bound on the optimizer steps
	seed       uint64
	cfg        Config
}

// reward of a completion: single-phase, holding A; two phases, the memory phase must hold A and
// not B, the judge phase B and not A (chance: 1 − (7/8)³ ≈ 0.33 and (7/8)³ − (6/8)³ ≈ 0.25).
func (s learnSetup) reward(p Phase, completion []int32) float32 {
	hasA, hasB := slices.Contains(completion, tokA), slices.Contains(completion, tokB)
	switch {
	case !s.twoPhases:
		return b2f(hasA)
	case p == PhaseMemory:
		return b2f(hasA && !hasB)
	default:
		return b2f(hasB && !hasA)
	}
}

func b2f(b bool) float32 {
	if b {
		return 1
	}
	return 0
}

// learnResult holds the mean sampled reward per step and phase.
type learnResult struct {
	curve   [][NumPhases]float64
	reached [NumPhases]int // first step whose 3-step running mean is ≥ 0.9, or −1
}

func learnTestConfig() Config {
	cfg := DefaultConfig()
	cfg.LearningRate = 0.01
	cfg.WarmupSteps = 0
	cfg.Beta = 0
	cfg.MaxGradNorm = 1
	cfg.MicroBatchSize = 32
	return cfg
}

// runLearning trains a fresh tiny model and stops once every phase has reached 0.9 (or after
// s.steps steps, always for the broken mask).
func runLearning(t *testing.T, s learnSetup) learnResult {
	t.Helper()
	ctx := context.New()
	tinyInit(ctx, s.seed)
	var ref *context.Context
	if s.cfg.Beta > 0 {
		var err error
		if ref, err = FrozenCopy(ctx); err != nil { // the frozen starting model
			t.Fatal(err)
		}
	}
	tr, err := NewTrainer(backend(t), ctx, tinyPolicy, s.cfg, s.steps)
	if err != nil {
		t.Fatal(err)
	}
	smp := newSampler(t, ctx, s.seed)
	phases := []Phase{PhaseMemory}
	if s.twoPhases {
		phases = append(phases, PhaseJudge)
	}
	res := learnResult{reached: [NumPhases]int{-1, -1}}
	for step := range s.steps {
		// Rollouts: for each group and phase, G completions of the phase's prompt.
		var prompts [][]int32
		for range groups {
			for _, p := range phases {
				for range chains {
					prompts = append(prompts, []int32{int32(tokMemoryPrompt + p)})
				}
			}
		}
		completions := smp.sample(t, prompts, completionLen)

		// Rewards and advantages per group and phase; sequence j = (group, phase, chain).
		var seqs []Sequence
		memAdv := map[[2]int][]float64{} // (group, chain) → memory advantage, for the broken mask
		j := 0
		for gi := range groups {
			for _, p := range phases {
				rewards := make([]float64, chains)
				for i := range chains {
					rewards[i] = float64(s.reward(p, completions[j+i]))
				}
				adv, err := GroupAdvantages(rewards, s.cfg.ScaleRewards)
				if err != nil {
					t.Fatal(err)
				}
				for i := range chains {
					if p == PhaseMemory {
						memAdv[[2]int{gi, i}] = append(memAdv[[2]int{gi, i}], adv[i])
					}
					a := adv[i]
					if s.brokenMask {
						a = memAdv[[2]int{gi, i}][0]
					}
					seqs = append(seqs, Sequence{Prompt: prompts[j+i], Completion: completions[j+i], Phase: p,
						Advantage: float32(a), Reward: float32(rewards[i])})
				}
				j += chains
			}
		}
		batch, err := NewBatch(seqs)
		if err != nil {
			t.Fatal(err)
		}
		if ref != nil {
			if batch.RefLogProbs, err = tr.LogProbs(ref, batch); err != nil {
				t.Fatal(err)
			}
		}
		stats, err := tr.Update(batch)
		if err != nil {
			t.Fatal(err)
		}
		var row [NumPhases]float64
		for _, p := range phases {
			row[p] = stats[0].Phase[p].MeanReward
		}
		res.curve = append(res.curve, row)
		done := true
		for _, p := range phases {
			if res.reached[p] < 0 && step >= 2 {
				mean := (res.curve[step][p] + res.curve[step-1][p] + res.curve[step-2][p]) / 3
				if mean >= 0.9 {
					res.reached[p] = step
				}
			}
			done = done && res.reached[p] >= 0
		}
		if done && !s.brokenMask {
			break
		}
	}
	return res
}

// logCurve prints the learning curve in -v output.
func logCurve(t *testing.T, name string, r learnResult, twoPhases bool) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: mean sampled reward per step", name)
	for step, row := range r.curve {
		if twoPhases {
			fmt.Fprintf(&b, "\n  step %3d  memory %.3f  judge %.3f", step+1, row[PhaseMemory], row[PhaseJudge])
		} else {
			fmt.Fprintf(&b, "\n  step %3d  reward %.3f", step+1, row[PhaseMemory])
		}
	}
	t.Log(b.String())
}

func first(r learnResult, p Phase) float64 { return r.curve[0][p] }

// learnSteps bounds every learning run; with the setups below the 3-step running mean of the
// reward reaches 0.9 by step 7 to 11 for seeds 1–8 (see TestLearningSeeds).
const learnSteps = 30

func twoPhaseConfig() Config {
	cfg := learnTestConfig()
	cfg.Beta, cfg.NumIterations, cfg.MicroBatchSize = 0.01, 2, 16
	return cfg
}

// checkLearns asserts (a) or (b): each phase starts near chance and reaches 0.9.
func checkLearns(t *testing.T, r learnResult, phases []Phase, chance float64) {
	t.Helper()
	for _, p := range phases {
		if c := first(r, p); c > chance+0.25 {
			t.Errorf("%s: first step's reward %.3f is not near chance (%.2f)", p, c, chance)
		}
		if r.reached[p] < 0 {
			t.Errorf("%s: reward did not reach 0.9 within %d steps", p, learnSteps)
		}
	}
}

// checkBrokenFails asserts (c): the memory phase learns, the judge phase does not.
func checkBrokenFails(t *testing.T, r learnResult) {
	t.Helper()
	if r.reached[PhaseMemory] < 0 {
		t.Errorf("memory: did not reach 0.9 within %d steps (the broken mask should only hurt the judge)", learnSteps)
	}
	if r.reached[PhaseJudge] >= 0 {
		t.Errorf("judge: reached 0.9 at step %d although its tokens never saw its own advantage", r.reached[PhaseJudge]+1)
	}
	mean := 0.0
	for _, row := range r.curve {
		mean += row[PhaseJudge] / float64(len(r.curve))
	}
	if mean > 0.5 {
		t.Errorf("judge: mean reward over the run %.3f, want it below 0.5", mean)
	}
}

// TestLearnsTargetToken: (a) a completion is rewarded when it holds token A.
func TestLearnsTargetToken(t *testing.T) {
	r := runLearning(t, learnSetup{steps: learnSteps, seed: 1, cfg: learnTestConfig()})
	logCurve(t, "one phase, reward = completion holds A", r, false)
	checkLearns(t, r, []Phase{PhaseMemory}, 0.33)
}

// TestLearnsTwoPhases: (b) two phases with different prompts and opposite targets both learn,
// with a KL penalty against a reference copy, μ = 2 iterations per rollout batch and 4
// micro-batches per step.
func TestLearnsTwoPhases(t *testing.T) {
	r := runLearning(t, learnSetup{twoPhases: true, steps: learnSteps, seed: 2, cfg: twoPhaseConfig()})
	logCurve(t, "two phases, memory: A and not B, judge: B and not A", r, true)
	checkLearns(t, r, []Phase{PhaseMemory, PhaseJudge}, 0.25)
}

// TestBrokenPhaseMaskFails: (c) the same run as (b) with the phase mask broken — judge tokens
// take their chain's memory advantage — learns the memory task but not the judge's.
func TestBrokenPhaseMaskFails(t *testing.T) {
	r := runLearning(t, learnSetup{twoPhases: true, brokenMask: true, steps: learnSteps, seed: 2, cfg: twoPhaseConfig()})
	logCurve(t, "two phases, broken phase mask", r, true)
	checkBrokenFails(t, r)
}

// TestLearningSeeds repeats (a), (b) and (c) for seeds 1..8 (under a second a seed): the
// runs above are not one lucky seed.
func TestLearningSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 24 learning runs")
	}
	const n = 8
	for seed := uint64(1); seed <= n; seed++ {
		a := runLearning(t, learnSetup{steps: learnSteps, seed: seed, cfg: learnTestConfig()})
		checkLearns(t, a, []Phase{PhaseMemory}, 0.33)
		b := runLearning(t, learnSetup{twoPhases: true, steps: learnSteps, seed: seed, cfg: twoPhaseConfig()})
		checkLearns(t, b, []Phase{PhaseMemory, PhaseJudge}, 0.25)
		c := runLearning(t, learnSetup{twoPhases: true, brokenMask: true, steps: learnSteps, seed: seed, cfg: twoPhaseConfig()})
		checkBrokenFails(t, c)
		judge := 0.0
		for _, row := range c.curve {
			judge = max(judge, row[PhaseJudge])
		}
		t.Logf("seed %d: steps to 0.9: (a) %d, (b) memory %d judge %d; broken mask: memory %d, judge never (best step %.3f)",
			seed, a.reached[0]+1, b.reached[0]+1, b.reached[1]+1, c.reached[0]+1, judge)
	}
}

// TestLearningIsDeterministic: the same seed gives the same curve and the same weights.
func TestLearningIsDeterministic(t *testing.T) {
	var curves [2][][NumPhases]float64
	for i := range curves {
		r := runLearning(t, learnSetup{twoPhases: true, steps: 3, seed: 5, cfg: twoPhaseConfig()})
		curves[i] = r.curve
	}
	if !slices.Equal(curves[0], curves[1]) {
		t.Fatalf("two runs with seed 5 differ: %v vs %v", curves[0], curves[1])
	}
}
