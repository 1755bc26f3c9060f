package bench

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/mageguard/mageguard/internal/heapstat"
	"github.com/mageguard/mageguard/model"
)

// DecodeShape is the shape of a benchmark generation: Rows prompts of
// PromptTokens tokens (the first PrefixTokens shared by all, as a role's
// system prompt is), each continued by NewTokens tokens.
type DecodeShape struct {
	Rows         int `json:"rows"`
	PrefixTokens int `json:"prefix_tokens"`
	PromptTokens int `json:"prompt_tokens"`
	NewTokens    int `json:"new_tokens"`
}

// Validate checks the shape; errors name the field.
func (s DecodeShape) Validate() error {
	switch {
	case s.Rows < 1:
		return fmt.Errorf("rows must be >= 1, got %d", s.Rows)
	case s.PromptTokens < 1:
		return fmt.Errorf("prompt tokens must be >= 1, got %d", s.PromptTokens)
	case s.PrefixTokens < 0 || s.PrefixTokens >= s.PromptTokens:
		return fmt.Errorf("prefix tokens must be in [0, prompt tokens), got %d", s.PrefixTokens)
	case s.NewTokens < 2:
		return fmt.Errorf("new tokens must be >= 2, got %d", s.NewTokens)
	}
	return nil
}

// DecodeResult is what Decode measured.
type DecodeResult struct {
	Shape DecodeShape `json:"shape"`
	// PrefillSeconds is a generation of one token per row: the prompts'
	// prefill and the first pick.
	PrefillSeconds float64 `json:"prefill_seconds"`
	// StepSeconds is a decoding step: (the whole generation − the one-token
	// one) / (NewTokens − 1), host-side sampling included.
	StepSeconds     float64 `json:"step_seconds"`
	TokensPerSecond float64 `json:"tokens_per_second"` // Rows / StepSeconds
	HeapPeakBytes   uint64  `json:"heap_peak_bytes,omitempty"`
}

// Decode times greedy generation with m on random prompts of shape s
// (no stop tokens: every row runs all NewTokens steps), after an untimed
// generation that compiles the graphs. With heap, the Go heap is sampled
// during the timed generation (pure-Go backend).
func Decode(m *model.Model, s DecodeShape, seed uint64, heap bool) (*DecodeResult, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("bench: decode shape: %w", err)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6465_636f_6465))
	V := m.Config().VocabSize
	prefix := make([]int, s.PrefixTokens)
	for i := range prefix {
		prefix[i] = rng.IntN(V)
	}
	prompts := make([][]int, s.Rows)
	for r := range prompts {
		prompts[r] = append([]int(nil), prefix...)
		for len(prompts[r]) < s.PromptTokens {
			prompts[r] = append(prompts[r], rng.IntN(V))
		}
	}
	gen := func(n int) (float64, error) {
		t0 := time.Now()
		_, err := m.Generate(prompts, model.GenerateOptions{MaxNewTokens: n})
		return time.Since(t0).Seconds(), err
	}
	if _, err := gen(2); err != nil { // compiles prefill and decoding
		return nil, fmt.Errorf("bench: decode: %w", err)
	}
	res := &DecodeResult{Shape: s}
	var err error
	if res.PrefillSeconds, err = gen(1); err != nil {
		return nil, fmt.Errorf("bench: decode: %w", err)
	}
	var h heapstat.Sampler
	if heap {
		h.Start()
	}
	all, err := gen(s.NewTokens)
	if heap {
		res.HeapPeakBytes = h.Stop()
	}
	if err != nil {
		return nil, fmt.Errorf("bench: decode: %w", err)
	}
	res.StepSeconds = max(all-res.PrefillSeconds, 1e-9) / float64(s.NewTokens-1)
	res.TokensPerSecond = float64(s.Rows) / res.StepSeconds
	return res, nil
}
