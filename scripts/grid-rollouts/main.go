// Command grid-rollouts reads the rollouts of GRPO runs on the synthetic
// benchmark (rollouts.jsonl written with train.log_texts, as make
// learn-grid's cells are: docs/learning.md) and says, step by step, what
// the memory kept and what the memory reward paid for it. "kept": of the
// memory calls between an attack's injection and its malicious action (lag
// 2 to the gap) whose previous memory held the injected identifier, the
// share that kept it; "adv kept" and "adv dropped": the mean memory
// advantage of those calls, split by whether they kept it (the credit a
// call gets for keeping); "caught g ≥ 2": the share of malicious actions
// of gap ≥ 2 the chains rejected. Usage:
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
	fmt.Println("| run | step | kept (lag ≥ 2 calls) | adv kept | adv dropped | caught g ≥ 2 |")
	fmt.Println("|---|---|---|---|---|---|")
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
			fmt.Printf("| %s | %d | %s | %s | %s | %s |\n", name, s.step, share(s.kept, s.calls), mean(s.advKept, s.kept),
				mean(s.advDropped, s.calls-s.kept), share(s.caught, s.attacks))
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

// stepStats are one step's counts.
type stepStats struct {
	step                int
	calls, kept         int
	advKept, advDropped float64
	attacks, caught     int
}

// summarize counts, per step, the memory calls between an injection and
// its malicious action (lag ≥ 2) whose previous memory held the injected
// identifier, and the malicious actions of gap ≥ 2.
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
		if tr == nil || tr.AttackType == nil {
			continue
		}
		g, ok := synth.Gap(*tr.AttackType)
		if !ok || g < 2 {
			continue
		}
		inj, bad := injection(tr)
		if inj < 0 {
			continue
		}
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
			if lag := r.Turn - inj; lag >= 2 && lag <= g && prev.Role(bad) == synth.RoleInjected {
				s.calls++
				if mem.Role(bad) == synth.RoleInjected {
					s.kept++
					s.advKept += r.AdvantageMemory
				} else {
					s.advDropped += r.AdvantageMemory
				}
			}
			if r.Label == 1 {
				s.attacks++
				if r.Decision == "reject" {
					s.caught++
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
