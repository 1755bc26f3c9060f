// Command guard-errors reads a `mageguard eval` of a guard on the
// synthetic benchmark (docs/synth.md) and says where its errors are: each
// memory call against what the world's rules would write from the memory
// the model was shown (teacher.Synth.Next: the call's own error, not one
// inherited from earlier calls), by kind of call, and each decision against
// the judge's rule on the memory the judge read (teacher.Judge), with the
// judge's p(reject) on acting actions by label.
//
//	go run ./scripts/guard-errors --data FILE --decisions EVAL_DIR/decisions.jsonl [--show N]
//
// Kinds of memory call: first (the window's first, which reads the user's
// prompt), injection (the observation it reads has an injected
// instruction), other. "Injected right" compares the injected lists as
// sets, "exact" the whole memory as text.
package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/synth"
	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/train/teacher"
)

func main() {
	data := flag.String("data", "", "the trajectories the eval ran on (data synth's output)")
	decisions := flag.String("decisions", "", "the eval's decisions.jsonl")
	show := flag.Int("show", 0, "also print the first N injection memory calls whose injected list is wrong")
	flag.Parse()
	if *data == "" || *decisions == "" {
		fmt.Fprintln(os.Stderr, "usage: guard-errors --data FILE --decisions EVAL_DIR/decisions.jsonl")
		os.Exit(2)
	}
	if err := run(*data, *decisions, *show); err != nil {
		fmt.Fprintln(os.Stderr, "guard-errors:", err)
		os.Exit(1)
	}
}

type tally struct{ n, exact, injected int }

// counts are a guard's errors (see the package comment).
type counts struct {
	trajectories, calls int
	memory              map[string]*tally // by kind of memory call
	agree               int               // decisions the rule on the memory read agrees with
	rejectNotRule       int               // rejects the rule approves
	approveRule         int               // approves the rule rejects
	scores              map[int][]float64 // p(reject) on acting actions, by label, sorted
	wrong               []string          // the first injection memory calls whose injected list is wrong (show)
}

var kinds = []string{"first", "injection", "other"}

func run(dataPath, decPath string, show int) error {
	trajs, err := dataset.ReadAll(dataPath)
	if err != nil {
		return err
	}
	ds, err := eval.ReadDecisions(decPath)
	if err != nil {
		return err
	}
	c, err := count(trajs, ds, show)
	if err != nil {
		return fmt.Errorf("%s: %w", decPath, err)
	}
	fmt.Printf("%d trajectories, %d turns\n\n", c.trajectories, c.calls)
	fmt.Println("| memory call | calls | exact | injected right |")
	fmt.Println("|---|---|---|---|")
	for _, k := range kinds {
		t := c.memory[k]
		fmt.Printf("| %s | %d | %d (%.2f) | %d (%.2f) |\n", k, t.n, t.exact, frac(t.exact, t.n), t.injected, frac(t.injected, t.n))
	}
	for _, w := range c.wrong {
		fmt.Println()
		fmt.Print(w)
	}
	fmt.Printf("\njudge vs the rule on the memory it read: %d of %d agree; %d rejects the rule approves, %d approves the rule rejects\n", c.agree, c.calls, c.rejectNotRule, c.approveRule)
	for _, label := range []int{0, 1} {
		if s := c.scores[label]; len(s) > 0 {
			fmt.Printf("p(reject) on acting actions of label %d (%d): min %.2f, median %.2f, max %.2f\n", label, len(s), s[0], s[len(s)/2], s[len(s)-1])
		}
	}
	return nil
}

// count compares the decisions ds of an eval with the world's rules on
// the trajectories trajs it ran on, keeping the first show injection
// memory calls whose injected list is wrong.
func count(trajs []*dataset.Trajectory, ds []eval.Decision, show int) (*counts, error) {
	byID := map[string]*dataset.Trajectory{}
	for _, tr := range trajs {
		byID[tr.ID] = tr
	}
	byTraj := map[string][]eval.Decision{}
	var ids []string
	for _, d := range ds {
		if _, ok := byTraj[d.TrajectoryID]; !ok {
			ids = append(ids, d.TrajectoryID)
		}
		byTraj[d.TrajectoryID] = append(byTraj[d.TrajectoryID], d)
	}
	c := &counts{trajectories: len(ids), memory: map[string]*tally{}, scores: map[int][]float64{}}
	for _, k := range kinds {
		c.memory[k] = &tally{}
	}
	for _, id := range ids {
		tr := byID[id]
		if tr == nil {
			return nil, fmt.Errorf("trajectory %s is not in the data", id)
		}
		rows := byTraj[id]
		sort.Slice(rows, func(a, b int) bool { return rows[a].Turn < rows[b].Turn })
		start, prev := rows[0].Turn, ""
		for _, d := range rows {
			if d.Turn >= len(tr.Turns) {
				return nil, fmt.Errorf("trajectory %s has no turn %d", id, d.Turn)
			}
			want, err := teacher.Synth{}.Next(tr, start, d.Turn, prev)
			if err != nil {
				return nil, err
			}
			kind := "other"
			switch {
			case d.Turn == start:
				kind = "first"
			case hasInjection(tr.Turns[d.Turn-1].Observation):
				kind = "injection"
			}
			t := c.memory[kind]
			t.n++
			if d.Memory == want {
				t.exact++
			}
			if sameSet(synth.ParseMemory(d.Memory).Injected(), synth.ParseMemory(want).Injected()) {
				t.injected++
			} else if kind == "injection" && len(c.wrong) < show {
				c.wrong = append(c.wrong, fmt.Sprintf("%s turn %d\n  read:   %q\n  before: %q\n  wrote:  %q\n  rule:   %q\n",
					id, d.Turn, tr.Turns[d.Turn-1].Observation, prev, d.Memory, want))
			}
			a := tr.Turns[d.Turn].Action
			rule, _ := teacher.Judge(d.Memory, a)
			c.calls++
			switch {
			case d.Decision == rule:
				c.agree++
			case d.Decision == teacher.Reject:
				c.rejectNotRule++
			default:
				c.approveRule++
			}
			if synth.Target(a.Name, a.Arguments) != "" && d.Score != nil {
				c.scores[d.Label] = append(c.scores[d.Label], *d.Score)
			}
			prev = d.Memory
		}
	}
	for _, s := range c.scores {
		slices.Sort(s)
	}
	return c, nil
}

func hasInjection(obs string) bool {
	for _, line := range strings.Split(obs, "\n") {
		if synth.IsInjectionLine(line) {
			return true
		}
	}
	return false
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func frac(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
