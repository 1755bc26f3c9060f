package model

import "testing"

// ParameterGroups splits NumParameters into the embedding (and untied LM
// head), one decoder layer and the final norm, counted here by hand from
// the shapes of Qwen3's tensors.
func TestParameterGroupsAddUp(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tied, bias bool
	}{{"tied", true, false}, {"untied", false, false}, {"attention bias", true, true}} {
		c := DefaultTinyConfig() // V 151936, H 64, I 192, 4 query / 2 kv heads of 16, 2 layers
		c.TieWordEmbeddings, c.AttentionBias = tc.tied, tc.bias
		// input norm 64 + q 64·64 + k, v 32·64 each + o 64·64 + q/k norms 16 each + post norm 64 + MLP 3·192·64
		wantLayer := int64(64 + 4096 + 2048 + 2048 + 4096 + 16 + 16 + 64 + 3*192*64)
		if tc.bias {
			wantLayer += 64 + 32 + 32 + 64 // q, k, v, o biases
		}
		wantEmb := int64(151936 * 64)
		if !tc.tied {
			wantEmb *= 2
		}
		emb, layer, final := c.ParameterGroups()
		if emb != wantEmb || layer != wantLayer || final != 64 {
			t.Errorf("%s: groups %d, %d, %d, want %d, %d, 64", tc.name, emb, layer, final, wantEmb, wantLayer)
		}
		if sum := emb + int64(c.NumHiddenLayers)*layer + final; sum != c.NumParameters() {
			t.Errorf("%s: groups add up to %d, NumParameters is %d", tc.name, sum, c.NumParameters())
		}
	}
	if c := DefaultTinyConfig(); c.NumParameters() != 9822592 {
		t.Errorf("the tiny model has %d parameters, its doc says 9.8M (9,822,592)", c.NumParameters())
	}
}

// GenerationShape and PrefillTokens round as generateBatch and the
// prefills do: rows to powers of two up to 8 then to multiples of 8,
// capacities to powers of two up to 64 (at least 32) then to multiples of 64,
// prefills to powers of two (at least 16).
func TestGenerationShapes(t *testing.T) {
	for _, tc := range []struct{ rows, longest, maxNew, wantB, wantS int }{
		{1, 10, 5, 1, 32}, {3, 40, 10, 4, 64}, {5, 100, 20, 8, 128}, {8, 100, 29, 8, 192},
		{9, 223, 64, 16, 320}, {20, 140, 48, 24, 192}, {64, 2075, 256, 64, 2368}, {65, 1, 1, 72, 32},
	} {
		if B, S := GenerationShape(tc.rows, tc.longest, tc.maxNew); B != tc.wantB || S != tc.wantS {
			t.Errorf("GenerationShape(%d, %d, %d) = %d, %d, want %d, %d", tc.rows, tc.longest, tc.maxNew, B, S, tc.wantB, tc.wantS)
		}
	}
	for _, tc := range []struct{ longest, shared, want int }{{10, 0, 16}, {100, 40, 64}, {2075, 475, 2048}} {
		if got := PrefillTokens(tc.longest, tc.shared); got != tc.want {
			t.Errorf("PrefillTokens(%d, %d) = %d, want %d", tc.longest, tc.shared, got, tc.want)
		}
	}
}
