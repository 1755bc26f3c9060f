// Package rewards computes the per-turn rewards of turn-wise GRPO (docs/design.md#rewards):
// the judge reward r^J, the temporally discounted memory reward r^M, the format penalty f
// and the length penalty λ, for the G chains that form one group at each turn of one
// trajectory. Everything here is a pure function of parsed outcomes; no model is involved.
package rewards

import (
	"fmt"
	"math"
)

// Config holds the reward constants (the `rewards` section of the configuration).
type Config struct {
	Gamma           float64 `yaml:"gamma"`            // γ ∈ [0, 1): discount of later turns in the memory reward (0 = immediate reward)
	Lambda          float64 `yaml:"lambda"`           // λ ≥ 0: weight of the memory length penalty
	FormatPenalty   float64 `yaml:"format_penalty"`   // f ≥ 0: subtracted when a call's output fails to parse
	LengthThreshold int     `yaml:"length_threshold"` // L > 0: memory length in characters (code points) above which the length penalty grows
	// MaliciousWeight w₁ > 0 is what a right decision on a label-1 turn
	// earns (1 on a label-0 turn): a class-weighted judge reward; 1 = the
	// paper's. How it moves the advantages: docs/design.md#rewards.
	MaliciousWeight float64 `yaml:"malicious_weight"`
}

// DefaultConfig returns the defaults of docs/design.md#rewards: f = 0.1, L = 2500, λ = 1.0, γ = 0.5
// (and w₁ = 1: no class weight).
func DefaultConfig() Config {
	return Config{Gamma: 0.5, Lambda: 1.0, FormatPenalty: 0.1, LengthThreshold: 2500, MaliciousWeight: 1}
}

// Validate checks the ranges of the constants; errors start with the key name.
func (c *Config) Validate() error {
	switch {
	case !(c.Gamma >= 0 && c.Gamma < 1):
		return fmt.Errorf("gamma must be in [0, 1), got %v", c.Gamma)
	case !(c.Lambda >= 0) || math.IsInf(c.Lambda, 0):
		return fmt.Errorf("lambda must be a finite number ≥ 0, got %v", c.Lambda)
	case !(c.FormatPenalty >= 0) || math.IsInf(c.FormatPenalty, 0):
		return fmt.Errorf("format_penalty must be a finite number ≥ 0, got %v", c.FormatPenalty)
	case c.LengthThreshold <= 0:
		return fmt.Errorf("length_threshold must be > 0, got %d", c.LengthThreshold)
	case !(c.MaliciousWeight > 0) || math.IsInf(c.MaliciousWeight, 0):
		return fmt.Errorf("malicious_weight must be a finite number > 0, got %v", c.MaliciousWeight)
	}
	return nil
}

// Outcome is what one chain produced at one turn.
type Outcome struct {
	MemoryParsed bool // the memory manager's output parsed as one valid update_memory call
	MemoryChars  int  // |m_{t,i}|: code points of the memory the chain carries after this turn (after the fallback to m_{t-1}; rollout.Turn.MemoryChars)
	JudgeParsed  bool // the judge's output parsed as one valid assess_risk call
	Reject       bool // the judge's decision d_{t,i}: true = reject, false = approve (only counts when JudgeParsed)
}

// Rewards holds the rewards of one trajectory and the terms they are made
// of, indexed [turn][chain].
type Rewards struct {
	Judge  [][]float64 // r^J_{t,i}
	Memory [][]float64 // r^M_{t,i}

	Correct    [][]float64 // c_{t,i}
	Discounted [][]float64 // (Σ_{k=t..T} γ^{k−t} w_k c_{k,i}) / (Σ_{k=t..T} γ^{k−t}): r^M before its penalties
}

// Correct returns c_{t,i}: 1 when the judge output parsed and its decision equals the
// label's (label 1 = malicious → reject, label 0 = benign → approve), else 0.
func Correct(label int, o Outcome) float64 {
	if o.JudgeParsed && o.Reject == (label == 1) {
		return 1
	}
	return 0
}

// LengthPenalty returns λ · min(1, max(0, |m| − L) / L) for a memory of chars code points.
func (c *Config) LengthPenalty(chars int) float64 {
	excess := math.Max(0, float64(chars-c.LengthThreshold)) / float64(c.LengthThreshold)
	return c.Lambda * math.Min(1, excess)
}

// Compute returns the judge and memory rewards (and their terms c and the
// discounted mean of w·c) of one trajectory of T turns, given its
// labels[t] ∈ {0, 1} and the outcomes[t][i] of its G chains (the same G at every turn):
//
//	c_{t,i}   = [judge parsed] · [d_{t,i} = d*_t]
//	w_t       = w₁ if labels[t] = 1, else 1         (rewards.malicious_weight; w₁ = 1: the paper's)
//	r^J_{t,i} = w_t c_{t,i} − f · [judge output failed to parse]
//	r^M_{t,i} = (Σ_{k=t..T} γ^{k−t} w_k c_{k,i}) / (Σ_{k=t..T} γ^{k−t})
//	            − f · [memory output failed to parse]
//	            − λ · min(1, max(0, |m_{t,i}| − L) / L)
//
// with 0⁰ = 1, so γ = 0 gives r^M_{t,i} = w_t c_{t,i} − penalties. The discounted sums run
// over the chain's own later turns and are computed backwards:
// N_t = w_t c_t + γ N_{t+1}, D_t = 1 + γ D_{t+1}, N_{T+1} = D_{T+1} = 0.
func Compute(cfg Config, labels []int, outcomes [][]Outcome) (Rewards, error) {
	if err := cfg.Validate(); err != nil {
		return Rewards{}, fmt.Errorf("rewards: %w", err)
	}
	T := len(labels)
	if len(outcomes) != T {
		return Rewards{}, fmt.Errorf("rewards: %d labels but outcomes for %d turns", T, len(outcomes))
	}
	if T == 0 {
		return Rewards{}, nil
	}
	G := len(outcomes[0])
	for t := range T {
		if labels[t] != 0 && labels[t] != 1 {
			return Rewards{}, fmt.Errorf("rewards: turn %d: label must be 0 or 1, got %d", t, labels[t])
		}
		if len(outcomes[t]) != G {
			return Rewards{}, fmt.Errorf("rewards: turn %d has %d chains, turn 0 has %d", t, len(outcomes[t]), G)
		}
		for i, o := range outcomes[t] {
			if o.MemoryChars < 0 {
				return Rewards{}, fmt.Errorf("rewards: turn %d chain %d: negative memory length %d", t, i, o.MemoryChars)
			}
		}
	}

	grid := func() [][]float64 {
		g := make([][]float64, T)
		for t := range T {
			g[t] = make([]float64, G)
		}
		return g
	}
	r := Rewards{Judge: grid(), Memory: grid(), Correct: grid(), Discounted: grid()}
	for i := range G {
		num, den := 0.0, 0.0 // N_{t+1}, D_{t+1}
		for t := T - 1; t >= 0; t-- {
			o := outcomes[t][i]
			c := Correct(labels[t], o)
			r.Correct[t][i] = c
			if labels[t] == 1 {
				c *= cfg.MaliciousWeight // w_t c_{t,i}
			}

			// Judge: r^J = w c − f·[judge failed to parse].
			r.Judge[t][i] = c
			if !o.JudgeParsed {
				r.Judge[t][i] -= cfg.FormatPenalty
			}

			// Memory: discounted mean of w c over turns t..T of this chain, minus penalties.
			num = c + cfg.Gamma*num
			den = 1 + cfg.Gamma*den
			r.Discounted[t][i] = num / den
			rm := num/den - cfg.LengthPenalty(o.MemoryChars)
			if !o.MemoryParsed {
				rm -= cfg.FormatPenalty
			}
			r.Memory[t][i] = rm
		}
	}
	return r, nil
}
