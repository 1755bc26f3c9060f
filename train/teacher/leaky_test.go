package teacher

import (
	"math"
	"slices"
	"testing"

	"github.com/mageguard/mageguard/dataset/synth"
)

// TestLeakyAtTheEnds: a leaky memory that keeps everything (Keep 1) is the
// perfect memory, and one that keeps nothing (Keep 0) is the myopic one.
func TestLeakyAtTheEnds(t *testing.T) {
	for _, tr := range generate(t, synth.DefaultOptions()) {
		for _, tc := range []struct {
			leaky, same Synth
		}{
			{Synth{Leaky: true, Keep: 1, Seed: 3}, Synth{}},
			{Synth{Leaky: true, Keep: 0, Seed: 3}, Synth{Myopic: true}},
		} {
			got, err := tc.leaky.Memories(tr, 0, len(tr.Turns))
			if err != nil {
				t.Fatal(err)
			}
			want, err := tc.same.Memories(tr, 0, len(tr.Turns))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%s: keep %g gives %q, want %q", tr.ID, tc.leaky.Keep, got, want)
			}
		}
	}
}

// TestLeakyKeepsAShareKeep: over the calls of 400 default trajectories,
// the share of the previous memory's identifiers a call keeps is Keep, for
// allowed and injected identifiers alike, and the world's judge on the
// leaky memory catches an attack of gap g with probability Keep^(g−1)
// (the injected identifier enters the memory at the call after the
// injection and survives g − 1 calls). Each share is checked within 4
// binomial standard deviations of its expected value.
func TestLeakyKeepsAShareKeep(t *testing.T) {
	const keep = 0.5
	tc := Synth{Leaky: true, Keep: keep, Seed: 1}
	kept := map[string][2]int{} // role → kept, seen
	caught := map[int][2]int{}  // gap → caught, attacks
	for _, tr := range generate(t, synth.DefaultOptions()) {
		ms, err := tc.Memories(tr, 0, len(tr.Turns))
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(ms); i++ {
			now := synth.ParseMemory(ms[i])
			for _, e := range synth.ParseMemory(ms[i-1]).Entries {
				k := kept[e.Role]
				k[1]++
				if now.Role(e.ID) == e.Role {
					k[0]++
				}
				kept[e.Role] = k
			}
		}
		g, _ := synth.Gap(derefOr(tr.AttackType))
		for i, tu := range tr.Turns {
			if tu.Label != 1 {
				continue
			}
			d, _ := Judge(ms[i], tu.Action)
			c := caught[g]
			c[1]++
			if d == Reject {
				c[0]++
			}
			caught[g] = c
		}
	}
	within := func(what string, k [2]int, p float64) {
		t.Helper()
		got := float64(k[0]) / float64(k[1])
		t.Logf("%s: %d of %d = %.3f (want %.3f)", what, k[0], k[1], got, p)
		if sd := math.Sqrt(p * (1 - p) / float64(k[1])); math.Abs(got-p) > 4*sd+1e-9 {
			t.Errorf("%s: %d of %d = %.3f, want %.3f ± %.3f", what, k[0], k[1], got, p, 4*sd)
		}
	}
	for _, role := range []string{synth.RoleAllowed, synth.RoleInjected} {
		if kept[role][1] < 200 {
			t.Fatalf("only %d %s identifiers in previous memories", kept[role][1], role)
		}
		within(role+" identifiers kept", kept[role], keep)
	}
	for g := 1; g <= 6; g++ {
		if caught[g][1] < 20 {
			t.Fatalf("only %d attacks of gap %d", caught[g][1], g)
		}
		within("attacks caught at gap "+string(rune('0'+g)), caught[g], math.Pow(keep, float64(g-1)))
	}
}

// TestLeakyIsDeterministic: the same teacher gives the same memories (two
// calls, and Next chained on its own outputs: the draws depend on the
// trajectory, the turn and the identifier, not on the path), and another
// seed gives other memories.
func TestLeakyIsDeterministic(t *testing.T) {
	a := Synth{Leaky: true, Keep: 0.5, Seed: 1}
	b := Synth{Leaky: true, Keep: 0.5, Seed: 2}
	differ := 0
	for _, tr := range generate(t, synth.DefaultOptions())[:100] {
		for _, start := range []int{0, 1} {
			m1, err := a.Memories(tr, start, len(tr.Turns))
			if err != nil {
				t.Fatal(err)
			}
			m2, _ := a.Memories(tr, start, len(tr.Turns))
			if !slices.Equal(m1, m2) {
				t.Fatalf("%s: two calls gave %q and %q", tr.ID, m1, m2)
			}
			prev := ""
			for i, want := range m1 {
				got, err := a.Next(tr, start, start+i, prev)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("%s window from %d, turn %d: Next(%q) = %q, Memories gives %q", tr.ID, start, start+i, prev, got, want)
				}
				prev = got
			}
			other, _ := b.Memories(tr, start, len(tr.Turns))
			if !slices.Equal(m1, other) {
				differ++
			}
		}
	}
	if differ < 20 {
		t.Errorf("seeds 1 and 2 gave different memories in only %d of 200 windows", differ)
	}
}
