// Command grid-rollouts reads the rollouts of GRPO runs on the synthetic
// benchmark (rollouts.jsonl written with train.log_texts, as make
// learn-grid's cells are: docs/learning.md) and says, step by step, what
// the memory kept, what the memory reward paid for it, and what the judge
// did. Columns: "kept before the attack": of the memory calls between an
// attack's injection and its malicious action (lag 2 to the gap) whose
// previous memory held the injected identifier, the share that kept it,
// and the mean memory advantage of those that kept it and of those that
// dropped it (the credit a call gets for keeping); "kept, any call": the
// same over every call after the injection whose previous memory held it
// (after the attack and in ignored-injection runs too); "caught g ≥ 2":
// the share of malicious actions of gap ≥ 2 the chains rejected; "FP,
// injected held" and "FP, none held": the share of label-0 actions
// rejected when the memory the judge read held an injected identifier,
// and when it held none. Usage:
//
//	go run ./scripts/grid-rollouts --data TRAIN.jsonl NAME=ROLLOUTS.jsonl ...
//
// A chain's memory at a turn is its memory call's text read leniently
// (synth.ParseMemory); a call that did not parse keeps the memory before.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/synth"
)

// row is the part of a rollouts.jsonl line read here.
type row struct {
	Step            int     `json:"step"`
	TrajectoryID    string  `json:"trajectory_id"`
	Turn            int     `json:"turn"`
	Chain           int     `json:"chain"`
	Label           int     `json:"label"`
	MemoryParsed    bool    `json:"memory_parsed"`
	Decision        string  `json:"decision"`
	AdvantageMemory float64 `json:"advantage_memory"`
	MemoryText      *string `json:"memory_text"`
}

func main() {
	data := flag.String("data", "", "the train file the runs drew from")
	flag.Parse()
	if *data == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: grid-rollouts --data TRAIN.jsonl NAME=ROLLOUTS.jsonl ...")
		os.Exit(2)
	}
	trajs, err := dataset.ReadAll(*data)
	if err != nil {
		fmt.Fprintln(os.Stderr, "grid-rollouts:", err)
		os.Exit(1)
	}
	byID := map[string]*dataset.Trajectory{}
	for _, tr := range trajs {
		byID[tr.ID] = tr
	}
	fmt.Println("| run | step | kept before the attack | adv kept | adv dropped | kept, any call | adv kept | adv dropped | caught g ≥ 2 | FP, injected held | FP, none held |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	for _, arg := range flag.Args() {
		name, path, ok := strings.Cut(arg, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "grid-rollouts: %q: want NAME=ROLLOUTS.jsonl\n", arg)
			os.Exit(2)
		}
		rows, err := read(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "grid-rollouts:", err)
			os.Exit(1)
		}
		for _, s := range summarize(rows, byID) {
			fmt.Printf("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, s.step,
				share(s.before.kept, s.before.calls), mean(s.before.advKept, s.before.kept), mean(s.before.advDropped, s.before.calls-s.before.kept),
				share(s.any.kept, s.any.calls), mean(s.any.advKept, s.any.kept), mean(s.any.advDropped, s.any.calls-s.any.kept),
				share(s.caught, s.attacks), share(s.fpHeld, s.negHeld), share(s.fpNone, s.negNone))
		}
	}
}

func read(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []row
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	for sc.Scan() {
		var r row
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if r.MemoryText == nil {
			return nil, fmt.Errorf("%s: no memory_text (run with train.log_texts: true)", path)
		}
		out = append(out, r)
	}
	return out, sc.Err()
}

// keeping counts memory calls whose previous memory held an injected
// identifier: how many kept it, and their memory advantages.
type keeping struct {
	calls, kept         int
	advKept, advDropped float64
}

func (k *keeping) add(kept bool, adv float64) {
	k.calls++
	if kept {
		k.kept++
		k.advKept += adv
	} else {
		k.advDropped += adv
	}
}

// stepStats are one step's counts.
type stepStats struct {
	step            int
	before, any     keeping
	attacks, caught int
	negHeld, fpHeld int
	negNone, fpNone int
}

// summarize counts, per step, the memory calls after an injection whose
// previous memory held the injected identifier (before the attack: lag 2
// to the gap), the malicious actions of gap ≥ 2, and the label-0 actions
// by whether the memory held an injected identifier.
func summarize(rows []row, byID map[string]*dataset.Trajectory) []stepStats {
	type key struct {
		step  int
		id    string
		chain int
	}
	chains := map[key][]row{}
	for _, r := range rows {
		k := key{r.Step, r.TrajectoryID, r.Chain}
		chains[k] = append(chains[k], r)
	}
	stats := map[int]*stepStats{}
	for k, rs := range chains {
		tr := byID[k.id]
		if tr == nil {
			continue
		}
		g := 0
		if tr.AttackType != nil {
			g, _ = synth.Gap(*tr.AttackType)
		}
		inj, bad := injection(tr)
		sort.Slice(rs, func(i, j int) bool { return rs[i].Turn < rs[j].Turn })
		s := stats[k.step]
		if s == nil {
			s = &stepStats{step: k.step}
			stats[k.step] = s
		}
		var mem synth.Memory
		for _, r := range rs {
			prev := mem
			if r.MemoryParsed {
				mem = synth.ParseMemory(strings.NewReplacer(`"`, " ", "{", " ", "}", " ", ":", " ").Replace(*r.MemoryText))
			}
			if inj >= 0 && r.Turn-inj >= 2 && prev.Role(bad) == synth.RoleInjected {
				kept := mem.Role(bad) == synth.RoleInjected
				s.any.add(kept, r.AdvantageMemory)
				if g >= 2 && r.Turn-inj <= g {
					s.before.add(kept, r.AdvantageMemory)
				}
			}
			switch {
			case r.Label == 1 && g >= 2:
				s.attacks++
				if r.Decision == "reject" {
					s.caught++
				}
			case r.Label == 0 && len(mem.Injected()) > 0:
				s.negHeld++
				if r.Decision == "reject" {
					s.fpHeld++
				}
			case r.Label == 0:
				s.negNone++
				if r.Decision == "reject" {
					s.fpNone++
				}
			}
		}
	}
	var out []stepStats
	for _, s := range stats {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].step < out[j].step })
	return out
}

// injection returns the turn whose observation carries tr's injection and
// its identifier (-1 when there is none).
func injection(tr *dataset.Trajectory) (int, string) {
	for i, tu := range tr.Turns {
		for _, line := range strings.Split(tu.Observation, "\n") {
			if synth.IsInjectionLine(line) {
				if ids := synth.Identifiers(line); len(ids) == 1 {
					return i, ids[0]
				}
			}
		}
	}
	return -1, ""
}

func share(k, n int) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f (%d/%d)", float64(k)/float64(n), k, n)
}

func mean(sum float64, n int) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%+.3f", sum/float64(n))
}
