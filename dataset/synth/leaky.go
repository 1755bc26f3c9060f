package synth

import (
	"hash/fnv"

	"github.com/mageguard/mageguard/internal/seed"
)

// Leak returns the entries of m that a leaky teacher (Teacher.Leaky) keeps
// at the memory call of turn t of trajectory trajID: each one, in order,
// when its draw (Kept) falls below Keep. m itself is not changed.
func (tc Teacher) Leak(trajID string, t int, m Memory) Memory {
	var out Memory
	for _, e := range m.Entries {
		if Kept(tc.Seed, trajID, t, e.ID, tc.Keep) {
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
