package teacher

import (
	"github.com/mageguard/mageguard/dataset/synth"
	"hash/fnv"

	"github.com/mageguard/mageguard/internal/seed"
)

// DefaultLeakyKeep is the keep probability of NameSynthLeaky without ":P".
const DefaultLeakyKeep = 0.5

// Leak returns the entries of m that a leaky teacher (Synth.Leaky) keeps
// at the memory call of turn t of trajectory trajID: each one, in order,
// when its draw (Kept) falls below Keep. m itself is not changed.
func (st Synth) Leak(trajID string, t int, m synth.Memory) synth.Memory {
	var out synth.Memory
	for _, e := range m.Entries {
		if Kept(st.Seed, trajID, t, e.ID, st.Keep) {
			out.Entries = append(out.Entries, e)
		}
	}
	return out
}

// Kept reports whether a leaky memory keeps identifier id at the memory
// call of turn t of trajectory trajID: whether a uniform draw in [0, 1),
// fixed by (seed, trajID, t, id), is below keep. The draws of different
// turns and identifiers are independent, so keep is the share of the
// previous memory's identifiers a call keeps.
func Kept(s uint64, trajID string, t int, id string, keep float64) bool {
	u := seed.Mix(s, hashString(trajID), uint64(t), hashString(id))
	return float64(u>>11)/(1<<53) < keep
}

// hashString is the 64-bit FNV-1a hash of s.
func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// Adds reports whether a memory call whose target is next, after the
// target prev, adds to the memory (sft.memory_changes draws among those).
// For a leaky memory that is a call whose next lists an identifier prev
// does not: a call that only drops is the leak's coin flips, not a change
// to learn from, and drawing those calls as well weighs the warm start
// toward dropping (a model trained so kept 6% of the injected identifiers
// at lag 2 on a held-out file, where its teacher keeps 50%). For the other
// synth teachers a call changes the memory when next differs from prev.
func (st Synth) Adds(prev, next string) bool {
	if !st.Leaky {
		return next != prev
	}
	before := synth.ParseMemory(prev)
	for _, e := range synth.ParseMemory(next).Entries {
		if before.Role(e.ID) == "" {
			return true
		}
	}
	return false
}
