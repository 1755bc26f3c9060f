package guardtest

import (
	"math"
	"testing"
)

// TestGrowMemory: no memory shown (or "(empty)") gives the first memory;
// a memory shown gets "+" appended.
func TestGrowMemory(t *testing.T) {
	for _, c := range []struct{ prompt, want string }{
		{"Update the memory. No memory block.", "m"},
		{"Current memory:\n<memory>\n(empty)\n</memory>", "m"},
		{"Current memory:\n<memory>\nm++\n</memory>\nUpdate the memory", "m+++"},
	} {
		if got := GrowMemory(c.prompt, "m"); got != c.want {
			t.Errorf("%q: %q, want %q", c.prompt, got, c.want)
		}
	}
}

// TestDecisionWatch: the watched ids get log 0.8 (approve), log 0.2
// (reject) and −Inf (any other id), in the order watched.
func TestDecisionWatch(t *testing.T) {
	tok := Tokenizer(t)
	a, _ := tok.TokenID("approve")
	r, _ := tok.TokenID("reject")
	row := DecisionWatch(tok, []int{r, 0, a}, 0.8, 0.2)
	if row[0] != float32(math.Log(0.2)) || !math.IsInf(float64(row[1]), -1) || row[2] != float32(math.Log(0.8)) {
		t.Errorf("row %v", row)
	}
}
