package train

import (
	"slices"
	"testing"
)

func TestSampleStep(t *testing.T) {
	pool := make([]bool, 100) // 10 positives: indices 0, 10, 20, …
	for i := 0; i < 100; i += 10 {
		pool[i] = true
	}
	cases := []struct {
		name     string
		n        int
		balance  bool
		wantPos  int // positives in the batch
		wantSize int
	}{
		{"balanced even", 8, true, 4, 8},
		{"balanced odd rounds positives up", 5, true, 3, 5},
		{"balanced, too few positives: fill with others", 30, true, 10, 30},
		{"whole pool", 500, true, 10, 100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := SampleStep(pool, c.n, c.balance, 7, 3)
			if len(got) != c.wantSize {
				t.Fatalf("size %d, want %d", len(got), c.wantSize)
			}
			npos := 0
			seen := map[int]bool{}
			for _, i := range got {
				if seen[i] {
					t.Fatalf("index %d drawn twice in one step", i)
				}
				seen[i] = true
				if pool[i] {
					npos++
				}
			}
			if npos != c.wantPos {
				t.Fatalf("%d positives, want %d", npos, c.wantPos)
			}
		})
	}
	// Determinism: the same (seed, step) gives the same batch; another step differs.
	a, b := SampleStep(pool, 8, true, 7, 3), SampleStep(pool, 8, true, 7, 3)
	if !slices.Equal(a, b) {
		t.Fatal("same seed and step gave different batches")
	}
	if slices.Equal(a, SampleStep(pool, 8, true, 7, 4)) {
		t.Fatal("two steps gave the same batch")
	}
	// Unbalanced draws are uniform: over many steps about 10% positives.
	npos, total := 0, 0
	for s := 0; s < 200; s++ {
		for _, i := range SampleStep(pool, 8, false, 1, s) {
			total++
			if pool[i] {
				npos++
			}
		}
	}
	if f := float64(npos) / float64(total); f < 0.07 || f > 0.13 {
		t.Fatalf("unbalanced positive fraction %.3f, want ~0.10", f)
	}
}
