package grpo

import (
	"fmt"
	"math"

	"github.com/mageguard/mageguard/rewards"
)

// advantageEps is added to the group's standard deviation (docs/design.md#turn-wise-grpo).
const advantageEps = 1e-4

// GroupAdvantages returns the advantages of one group (one turn, one phase, G chains):
//
//	A_i = (r_i − mean_j r_j) / (std_j r_j + 1e-4)    scale = group
//	A_i =  r_i − mean_j r_j                          scale = none (Dr. GRPO)
//
// with the population standard deviation (divided by G). When all rewards are equal, every
// advantage is exactly 0.
func GroupAdvantages(rewards []float64, scale string) ([]float64, error) {
	if scale != ScaleGroup && scale != ScaleNone {
		return nil, fmt.Errorf("grpo: scale_rewards must be %s or %s, got %q", ScaleGroup, ScaleNone, scale)
	}
	adv := make([]float64, len(rewards))
	if len(rewards) == 0 {
		return adv, nil
	}
	allEqual := true
	mean := 0.0
	for i, r := range rewards {
		if math.IsNaN(r) || math.IsInf(r, 0) {
			return nil, fmt.Errorf("grpo: reward %d is %v", i, r)
		}
		allEqual = allEqual && r == rewards[0]
		mean += r
	}
	if allEqual {
		return adv, nil
	}
	mean /= float64(len(rewards))
	variance := 0.0
	for _, r := range rewards {
		variance += (r - mean) * (r - mean)
	}
	std := math.Sqrt(variance / float64(len(rewards)))
	for i, r := range rewards {
		adv[i] = r - mean
		if scale == ScaleGroup {
			adv[i] /= std + advantageEps
		}
	}
	return adv, nil
}

// TurnAdvantages returns the advantages of one phase of one trajectory: rewards[t][i] is the
// reward of chain i at turn t, and each turn's G chains form their own group. Call it once
// for the memory rewards and once for the judge rewards: phases never share a group.
func TurnAdvantages(rewards [][]float64, scale string) ([][]float64, error) {
	out := make([][]float64, len(rewards))
	for t, group := range rewards {
		adv, err := GroupAdvantages(group, scale)
		if err != nil {
			return nil, fmt.Errorf("turn %d: %w", t, err)
		}
		out[t] = adv
	}
	return out, nil
}

// PhaseAdvantages returns the memory and judge advantages [turn][chain] of one trajectory's
// rewards: every turn and phase is its own group. A memory call takes memory[t][i] and a judge
// call judge[t][i]; never the other phase's (the phase mask).
func PhaseAdvantages(r rewards.Rewards, scale string) (memory, judge [][]float64, err error) {
	if memory, err = TurnAdvantages(r.Memory, scale); err != nil {
		return nil, nil, fmt.Errorf("memory rewards: %w", err)
	}
	if judge, err = TurnAdvantages(r.Judge, scale); err != nil {
		return nil, nil, fmt.Errorf("judge rewards: %w", err)
	}
	return memory, judge, nil
}
