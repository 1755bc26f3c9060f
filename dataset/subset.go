package dataset

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
)

// SubsetOptions select a small sample of trajectories (for bundled demo data).
type SubsetOptions struct {
	MaxTurns            int     // keep trajectories with at most this many actions (0 = no limit)
	MaxObservationChars int     // keep trajectories whose every observation has at most this many characters (0 = no limit)
	AttackPerSuite      int     // attack trajectories drawn per suite
	BenignPerSuite      int     // benign trajectories drawn per suite
	PositiveFrac        float64 // fraction of each suite's attack draw taken from attack runs with a label-1 action; < 0 = no stratification
	Seed                uint64  // seed of the draw
}

// Subset filters trajs by length and draws, per suite and kind, a seeded
// random sample (pools sorted by id before shuffling, so the input order does
// not matter). A suite with fewer eligible trajectories than asked gives all
// it has. The result keeps the input order.
func Subset(trajs []*Trajectory, o SubsetOptions) ([]*Trajectory, error) {
	if o.AttackPerSuite < 0 || o.BenignPerSuite < 0 {
		return nil, fmt.Errorf("subset: negative count")
	}
	if o.PositiveFrac > 1 {
		return nil, fmt.Errorf("subset: positive fraction %v > 1", o.PositiveFrac)
	}
	// pools[suite][0: benign, 1: attack without positive, 2: attack with positive]
	pools := map[string]*[3][]*Trajectory{}
	for _, t := range trajs {
		if !o.fits(t) {
			continue
		}
		p := pools[t.Suite]
		if p == nil {
			p = &[3][]*Trajectory{}
			pools[t.Suite] = p
		}
		k := 0
		if t.IsAttack() {
			k = 1
			if t.Positives() > 0 {
				k = 2
			}
		}
		p[k] = append(p[k], t)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x73756273))
	draw := func(pool []*Trajectory, n int) []*Trajectory {
		sort.Slice(pool, func(i, j int) bool { return pool[i].ID < pool[j].ID })
		rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
		return pool[:min(n, len(pool))]
	}
	keep := map[string]bool{}
	for _, s := range slices.Sorted(maps.Keys(pools)) {
		p := pools[s]
		var picked []*Trajectory
		picked = append(picked, draw(p[0], o.BenignPerSuite)...)
		if o.PositiveFrac < 0 {
			picked = append(picked, draw(append(append([]*Trajectory{}, p[1]...), p[2]...), o.AttackPerSuite)...)
		} else {
			withPos := int(float64(o.AttackPerSuite)*o.PositiveFrac + 0.5)
			a := draw(p[2], withPos)
			picked = append(picked, a...)
			picked = append(picked, draw(p[1], o.AttackPerSuite-len(a))...)
		}
		for _, t := range picked {
			keep[t.ID] = true
		}
	}
	var out []*Trajectory
	for _, t := range trajs {
		if keep[t.ID] {
			out = append(out, t)
		}
	}
	return out, nil
}

func (o *SubsetOptions) fits(t *Trajectory) bool {
	if o.MaxTurns > 0 && len(t.Turns) > o.MaxTurns {
		return false
	}
	if o.MaxObservationChars > 0 {
		for _, tu := range t.Turns {
			if len([]rune(tu.Observation)) > o.MaxObservationChars {
				return false
			}
		}
	}
	return true
}
