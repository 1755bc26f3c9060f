package rollout

import "testing"

func TestWindow(t *testing.T) {
	cases := []struct {
		name       string
		labels     []int
		maxTurns   int
		start, end int
	}{
		{"short trajectory is whole", []int{0, 1, 0}, 4, 0, 3},
		{"no limit", []int{0, 0, 0, 0, 0}, 0, 0, 5},
		{"no positive: first window", []int{0, 0, 0, 0, 0, 0}, 4, 0, 4},
		{"positive inside first window", []int{0, 0, 1, 0, 0, 0}, 4, 0, 4},
		{"positive at last turn of first window", []int{0, 0, 0, 1, 0, 0}, 4, 0, 4},
		{"positive later: centred on it", []int{0, 0, 0, 0, 0, 1, 0, 1}, 4, 4, 8},
		{"centred, odd size", []int{0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, 3, 5, 8},
		{"positive at the very end: clamped", []int{0, 0, 0, 0, 0, 0, 0, 1}, 3, 5, 8},
		{"only the first positive counts", []int{0, 0, 0, 0, 1, 1, 1, 1}, 2, 4, 6},
		{"exactly max turns", []int{0, 0, 0, 1}, 4, 0, 4},
		{"max 1", []int{0, 0, 1, 0}, 1, 2, 3},
		{"max 2, positive at 3", []int{0, 0, 0, 1, 0}, 2, 3, 5},
		{"empty", nil, 4, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, e := Window(c.labels, c.maxTurns)
			if s != c.start || e != c.end {
				t.Fatalf("Window(%v, %d) = [%d, %d), want [%d, %d)", c.labels, c.maxTurns, s, e, c.start, c.end)
			}
			// Invariants: length is min(n, max); the first positive is inside.
			if c.maxTurns > 0 && e-s != min(len(c.labels), c.maxTurns) {
				t.Fatalf("window length %d", e-s)
			}
			for i, l := range c.labels {
				if l == 1 {
					if i < s || i >= e {
						t.Fatalf("first positive %d outside [%d,%d)", i, s, e)
					}
					break
				}
			}
		})
	}
}
