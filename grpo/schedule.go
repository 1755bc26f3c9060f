package grpo

import "math"

// LearningRate returns the learning rate of optimizer step s (0-based) out of totalSteps:
// a linear warm-up over the first W = warmup_steps steps, lr·(s+1)/W, so the first step already
// moves and step W−1 reaches lr; then, with progress p = (s − W) / (totalSteps − W):
//
//	constant: lr
//	linear:   lr · (1 − p)
//	cosine:   lr · (1 + cos(π p)) / 2
//
// totalSteps only matters for linear and cosine; steps past it get 0.
func LearningRate(cfg Config, s, totalSteps int) float64 {
	lr := cfg.LearningRate
	w := cfg.WarmupSteps
	if s < w {
		return lr * float64(s+1) / float64(w)
	}
	if cfg.LRSchedule == ScheduleConstant {
		return lr
	}
	p := float64(s-w) / float64(max(1, totalSteps-w))
	if p >= 1 {
		return 0
	}
	if cfg.LRSchedule == ScheduleCosine {
		return lr * (1 + math.Cos(math.Pi*p)) / 2
	}
	return lr * (1 - p)
}
