package eval

import (
	"sync"

	"github.com/mageguard/mageguard/rollout/generate"
)

// Meter is a generate.Generator that passes every generation call on to
// Generator and then tells the Evaluate watching it (Options.Meter) how
// many rows and tokens the call produced. Guard.Run steps turn by turn
// inside a chunk of trajectories, so a guard built on a Meter lets Evaluate
// report progress after every turn, not only after every chunk, and stop
// after the current generation call when its context is cancelled.
//
//	meter := &eval.Meter{Generator: gen}
//	guard, err := rollout.NewGuard(cfg, tok, meter)
//	opts.Meter = meter
type Meter struct {
	Generator generate.Generator

	mu    sync.Mutex
	after func(rows, promptTokens, newTokens int) error
}

// Generate implements generate.Generator.
func (m *Meter) Generate(reqs []generate.Request, s generate.Sampling) ([]generate.Completion, error) {
	out, err := m.Generator.Generate(reqs, s)
	if err != nil {
		return out, err
	}
	m.mu.Lock()
	after := m.after
	m.mu.Unlock()
	if after == nil {
		return out, nil
	}
	prompt, generated := 0, 0
	for i := range reqs {
		prompt += len(reqs[i].Prompt)
	}
	for i := range out {
		generated += len(out[i].Tokens)
	}
	if err := after(len(reqs), prompt, generated); err != nil {
		return nil, err
	}
	return out, nil
}

// watch installs (or, with nil, removes) the function told about each call.
func (m *Meter) watch(after func(rows, promptTokens, newTokens int) error) {
	m.mu.Lock()
	m.after = after
	m.mu.Unlock()
}
