package model

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestGenerateWatchesTokenLogProbs checks that a row reports, at every
// step, the log-probs of the watched ids under logits / T without the
// constraint (what a decision score is computed from), against a full
// forward pass of the generated sequence; and that a watched id outside the
// vocabulary is refused.
func TestGenerateWatchesTokenLogProbs(t *testing.T) {
	m := newTestModel(t, testConfig(), 8)
	prompts := [][]int{{3, 9, 27, 4}, {81, 200, 100}}
	watch := []int{10, 11, 255, 0}
	opts := GenerateOptions{
		MaxNewTokens: 6, Temperature: 0.7, Seed: 3, Watch: watch,
		Constrain: func(row int, generated []int) Constraint {
			if row == 1 && len(generated) == 2 {
				return Allow(10, 11) // the watched ids are unconstrained log-probs all the same
			}
			return Constraint{}
		},
	}
	gens, err := m.Generate(prompts, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range gens {
		if len(g.Watch) != len(g.Tokens) {
			t.Fatalf("row %d: %d watched steps for %d tokens", i, len(g.Watch), len(g.Tokens))
		}
		full := fullLogProbs(t, m, append(slices.Clone(prompts[i]), g.Tokens...), 0.7)
		for s := range g.Tokens {
			if len(g.Watch[s]) != len(watch) {
				t.Fatalf("row %d step %d: %d watched values", i, s, len(g.Watch[s]))
			}
			for k, id := range watch {
				if d := math.Abs(float64(g.Watch[s][k]) - full[len(prompts[i])-1+s][id]); d > 1e-5 {
					t.Errorf("row %d step %d id %d: watched log-prob %g off by %g", i, s, id, g.Watch[s][k], d)
				}
			}
		}
	}
	if !slices.Contains(watch, gens[1].Tokens[2]) {
		t.Errorf("row 1 step 2 picked %d outside Allow(10, 11)", gens[1].Tokens[2])
	}
	if _, err := m.Generate(prompts, GenerateOptions{MaxNewTokens: 1, Watch: []int{256}}); err == nil || !strings.Contains(err.Error(), "watched token 256") {
		t.Errorf("watching id 256 of a 256-id vocabulary: error %v", err)
	}
}
