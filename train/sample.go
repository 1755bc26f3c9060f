package train

import (
	"math/rand/v2"
)

// SampleStep picks the trajectories of one training step: n distinct
// indices into a pool where positive[i] says whether trajectory i is an
// attack run with a label-1 action. With balance, half the batch (rounded
// up) comes from the positives and the rest from the others, as far as each
// side has enough; without it, n indices are drawn uniformly. The draw
// depends only on (seed, step), so a resumed run draws what an
// uninterrupted one would.
func SampleStep(positive []bool, n int, balance bool, seed uint64, step int) []int {
	rng := rand.New(rand.NewPCG(seed, uint64(step)+0x5eed))
	if n >= len(positive) {
		n = len(positive)
	}
	if !balance {
		return rng.Perm(len(positive))[:n]
	}
	var pos, neg []int
	for i, p := range positive {
		if p {
			pos = append(pos, i)
		} else {
			neg = append(neg, i)
		}
	}
	nPos := min((n+1)/2, len(pos))
	nNeg := min(n-nPos, len(neg))
	nPos = min(n-nNeg, len(pos)) // fill from the positives when the others run short
	var out []int
	for _, k := range rng.Perm(len(pos))[:nPos] {
		out = append(out, pos[k])
	}
	for _, k := range rng.Perm(len(neg))[:nNeg] {
		out = append(out, neg[k])
	}
	return out
}
