package dataset

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
)

// maxSplitTries bounds the reshuffles Split makes per suite to satisfy its
// constraints.
const maxSplitTries = 1000

// Split divides trajectories into train and eval sets, disjoint by task
// (suite + user_task_id): no task is on both sides. Each suite is split on
// its own: its tasks are shuffled (seeded; tasks sorted first, so the input
// order does not matter) and taken into eval until eval holds at least
// evalFrac of the suite's trajectories (at least one task, never all). A
// shuffle is kept only when both sides of the suite hold attack and benign
// trajectories; otherwise the next shuffle is tried. It fails, naming the
// suite, when no shuffle satisfies that (e.g. a suite with one task). Each
// side keeps the input order. The same input and seed give the same split.
func Split(trajs []*Trajectory, evalFrac float64, seed uint64) (train, eval []*Trajectory, err error) {
	if !(evalFrac > 0 && evalFrac < 1) {
		return nil, nil, fmt.Errorf("eval fraction %v: want 0 < F < 1", evalFrac)
	}
	type task struct {
		key            string
		n              int
		attack, benign bool
	}
	suites := map[string]map[string]*task{}
	for _, t := range trajs {
		m := suites[t.Suite]
		if m == nil {
			m = map[string]*task{}
			suites[t.Suite] = m
		}
		k := m[t.TaskKey()]
		if k == nil {
			k = &task{key: t.TaskKey()}
			m[t.TaskKey()] = k
		}
		k.n++
		if t.IsAttack() {
			k.attack = true
		} else {
			k.benign = true
		}
	}
	names := slices.Sorted(maps.Keys(suites))
	rng := rand.New(rand.NewPCG(seed, 0x6d616765))
	evalTasks := map[string]bool{}
	for _, suite := range names {
		tasks := make([]*task, 0, len(suites[suite]))
		total := 0
		for _, k := range suites[suite] {
			tasks = append(tasks, k)
			total += k.n
		}
		sort.Slice(tasks, func(i, j int) bool { return tasks[i].key < tasks[j].key })
		if len(tasks) < 2 {
			return nil, nil, fmt.Errorf("split: suite %q has %d task(s); need at least 2 to put it on both sides", suite, len(tasks))
		}
		ok := false
		for try := 0; try < maxSplitTries && !ok; try++ {
			rng.Shuffle(len(tasks), func(i, j int) { tasks[i], tasks[j] = tasks[j], tasks[i] })
			var in int
			var ev [2]bool // attack, benign on the eval side
			n := 0
			for in = 0; in < len(tasks)-1; in++ {
				if in > 0 && float64(n) >= evalFrac*float64(total) {
					break
				}
				n += tasks[in].n
				ev[0] = ev[0] || tasks[in].attack
				ev[1] = ev[1] || tasks[in].benign
			}
			var tr [2]bool
			for _, k := range tasks[in:] {
				tr[0] = tr[0] || k.attack
				tr[1] = tr[1] || k.benign
			}
			if ev[0] && ev[1] && tr[0] && tr[1] {
				ok = true
				for _, k := range tasks[:in] {
					evalTasks[k.key] = true
				}
			}
		}
		if !ok {
			return nil, nil, fmt.Errorf("split: suite %q: no task-disjoint split with attack and benign runs on both sides (eval fraction %v)", suite, evalFrac)
		}
	}
	for _, t := range trajs {
		if evalTasks[t.TaskKey()] {
			eval = append(eval, t)
		} else {
			train = append(train, t)
		}
	}
	return train, eval, nil
}
