package dataset

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// TurnBuckets are the turns-per-trajectory buckets of the stats histogram
// (those of the AgentDojo reference labels' figures): [Lo, Hi], Hi < 0 = no bound.
var TurnBuckets = []struct {
	Label  string
	Lo, Hi int
}{
	{"0", 0, 0}, {"1", 1, 1}, {"2", 2, 2}, {"3", 3, 3}, {"4-5", 4, 5},
	{"6-8", 6, 8}, {"9-12", 9, 12}, {"13-20", 13, 20}, {"21+", 21, -1},
}

// Stats summarises a trajectory file. Its JSON form is what
// `mageguard data stats --json` prints (keys documented in docs/data.md).
type Stats struct {
	File          string                 `json:"file"`
	Trajectories  int                    `json:"trajectories"`
	Attack        int                    `json:"attack"`
	Benign        int                    `json:"benign"`
	ZeroAction    int                    `json:"zero_action_trajectories"` // trajectories with no action
	Actions       int                    `json:"actions"`
	Positives     int                    `json:"positives"` // actions labeled 1
	Tasks         int                    `json:"tasks"`     // distinct suite + user_task_id
	BySuite       map[string]*GroupStats `json:"by_suite"`
	ByModel       map[string]*GroupStats `json:"by_model"`
	ByAttackType  map[string]*GroupStats `json:"by_attack_type"` // attack runs only
	TurnHistogram []Bucket               `json:"turns_histogram"`
	AttackHorizon HorizonStats           `json:"attack_horizon"`
}

// GroupStats counts one group of trajectories.
type GroupStats struct {
	Trajectories int `json:"trajectories"`
	Attack       int `json:"attack"`
	Benign       int `json:"benign"`
	Actions      int `json:"actions"`
	Positives    int `json:"positives"`
	Tasks        int `json:"tasks"`
	tasks        map[string]bool
}

// Bucket is one bar of the turns-per-trajectory histogram.
type Bucket struct {
	Turns        string `json:"turns"` // "0", "1", …, "4-5", …, "21+"
	Trajectories int    `json:"trajectories"`
}

// HorizonStats describes the attack horizon: the number of actions labeled 1
// per attack trajectory.
type HorizonStats struct {
	Mean      float64        `json:"mean"`      // over attack trajectories (0 when there are none)
	WithAny   int            `json:"with_any"`  // attack trajectories with at least one positive
	Histogram []HorizonCount `json:"histogram"` // positives → attack trajectories, ascending, only non-empty
}

// HorizonCount is one bar of the attack-horizon histogram.
type HorizonCount struct {
	Positives    int `json:"positives"`
	Trajectories int `json:"trajectories"`
}

// NewStats returns empty stats for file.
func NewStats(file string) *Stats {
	s := &Stats{File: file, BySuite: map[string]*GroupStats{}, ByModel: map[string]*GroupStats{},
		ByAttackType: map[string]*GroupStats{}}
	for _, b := range TurnBuckets {
		s.TurnHistogram = append(s.TurnHistogram, Bucket{Turns: b.Label})
	}
	return s
}

// Add counts one trajectory.
func (s *Stats) Add(t *Trajectory) {
	pos := t.Positives()
	s.Trajectories++
	s.Actions += len(t.Turns)
	s.Positives += pos
	if len(t.Turns) == 0 {
		s.ZeroAction++
	}
	if t.IsAttack() {
		s.Attack++
	} else {
		s.Benign++
	}
	groups := []*GroupStats{group(s.BySuite, t.Suite), group(s.ByModel, t.Model)}
	if t.IsAttack() {
		at := "unknown"
		if t.AttackType != nil {
			at = *t.AttackType
		}
		groups = append(groups, group(s.ByAttackType, at))
	}
	for _, g := range groups {
		g.Trajectories++
		g.Actions += len(t.Turns)
		g.Positives += pos
		if t.IsAttack() {
			g.Attack++
		} else {
			g.Benign++
		}
		if !g.tasks[t.TaskKey()] {
			g.tasks[t.TaskKey()] = true
			g.Tasks++
		}
	}
	for i, b := range TurnBuckets {
		if len(t.Turns) >= b.Lo && (b.Hi < 0 || len(t.Turns) <= b.Hi) {
			s.TurnHistogram[i].Trajectories++
			break
		}
	}
	if t.IsAttack() {
		h := &s.AttackHorizon
		k := sort.Search(len(h.Histogram), func(i int) bool { return h.Histogram[i].Positives >= pos })
		if k == len(h.Histogram) || h.Histogram[k].Positives != pos {
			h.Histogram = append(h.Histogram, HorizonCount{})
			copy(h.Histogram[k+1:], h.Histogram[k:])
			h.Histogram[k] = HorizonCount{Positives: pos}
		}
		h.Histogram[k].Trajectories++
		if pos > 0 {
			h.WithAny++
		}
	}
}

// Finish computes the derived figures (task counts, mean horizon).
func (s *Stats) Finish() {
	s.Tasks = 0
	seen := map[string]bool{}
	for _, g := range s.BySuite {
		for k := range g.tasks {
			if !seen[k] {
				seen[k] = true
				s.Tasks++
			}
		}
	}
	s.AttackHorizon.Mean = 0
	if s.Attack > 0 {
		total := 0
		for _, h := range s.AttackHorizon.Histogram {
			total += h.Positives * h.Trajectories
		}
		s.AttackHorizon.Mean = float64(total) / float64(s.Attack)
	}
	if s.AttackHorizon.Histogram == nil {
		s.AttackHorizon.Histogram = []HorizonCount{}
	}
}

func group(m map[string]*GroupStats, key string) *GroupStats {
	g := m[key]
	if g == nil {
		g = &GroupStats{tasks: map[string]bool{}}
		m[key] = g
	}
	return g
}

// ComputeStats reads path and summarises it.
func ComputeStats(path string) (*Stats, error) {
	r, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	s := NewStats(path)
	for {
		t, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		s.Add(t)
	}
	s.Finish()
	return s, nil
}

// WriteText prints the stats as readable tables.
func (s *Stats) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "file: %s\n", s.File)
	fmt.Fprintf(&b, "trajectories: %s (%s attack, %s benign; %s with no action) over %s tasks\n",
		num(s.Trajectories), num(s.Attack), num(s.Benign), num(s.ZeroAction), num(s.Tasks))
	fmt.Fprintf(&b, "actions: %s, labeled 1: %s\n\n", num(s.Actions), num(s.Positives))
	table := func(title string, m map[string]*GroupStats) {
		rows := [][]string{{title, "attack", "benign", "tasks", "actions", "positives"}}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			g := m[k]
			rows = append(rows, []string{k, num(g.Attack), num(g.Benign), num(g.Tasks), num(g.Actions), num(g.Positives)})
		}
		writeTable(&b, rows)
		b.WriteString("\n")
	}
	table("suite", s.BySuite)
	table("model", s.ByModel)
	table("attack type", s.ByAttackType)
	var parts []string
	for _, h := range s.TurnHistogram {
		parts = append(parts, fmt.Sprintf("%s: %s", h.Turns, num(h.Trajectories)))
	}
	fmt.Fprintf(&b, "turns per trajectory: %s\n", strings.Join(parts, ", "))
	parts = parts[:0]
	for _, h := range s.AttackHorizon.Histogram {
		parts = append(parts, fmt.Sprintf("%d: %s", h.Positives, num(h.Trajectories)))
	}
	fmt.Fprintf(&b, "attack horizon (actions labeled 1 per attack trajectory): mean %.3f, %s with any; %s\n",
		s.AttackHorizon.Mean, num(s.AttackHorizon.WithAny), strings.Join(parts, ", "))
	_, err := io.WriteString(w, b.String())
	return err
}

// writeTable aligns rows: the first column left, the others right.
func writeTable(b *strings.Builder, rows [][]string) {
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, r := range rows {
		for i, c := range r {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		b.WriteString("\n")
	}
}

// num formats n with thousands separators (5,625).
func num(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + num(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
