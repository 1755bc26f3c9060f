package dataset

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Comparison is the result of Compare: how a file B (e.g. an importer's
// output) agrees with a reference file A, trajectory by trajectory (matched by
// id) and action by action (matched by turn index).
type Comparison struct {
	A, B            string         `json:"-"`
	TrajectoriesA   int            `json:"trajectories_a"`
	TrajectoriesB   int            `json:"trajectories_b"`
	OnlyInA         []string       `json:"only_in_a"`       // ids missing from B
	OnlyInB         []string       `json:"only_in_b"`       // ids missing from A
	Common          int            `json:"common"`          // ids in both
	Actions         int            `json:"actions"`         // action positions compared: per common id, the longer turn list
	LabelAgree      int            `json:"label_agree"`     // positions present in both with equal labels
	LabelAgreement  float64        `json:"label_agreement"` // LabelAgree / Actions (1 when Actions is 0)
	LabelDiffs      []LabelDiff    `json:"label_diffs"`     // every position whose labels differ or that one side lacks
	FieldDiffs      map[string]int `json:"field_diffs"`     // number of differing values per field (turn fields per action)
	FieldDiffSample []FieldDiff    `json:"field_diff_sample"`
}

// LabelDiff is one action whose label differs (Label -1 = the action is absent).
type LabelDiff struct {
	ID     string `json:"id"`
	Turn   int    `json:"turn"`
	Action string `json:"action"`
	LabelA int    `json:"label_a"`
	LabelB int    `json:"label_b"`
}

// FieldDiff is one differing non-label value.
type FieldDiff struct {
	ID    string `json:"id"`
	Field string `json:"field"`
	A     string `json:"a"`
	B     string `json:"b"`
}

const maxFieldDiffSample = 20

// Compare reads two trajectory files and compares them (A is the reference).
// Arguments are compared as JSON values.
func Compare(pathA, pathB string) (*Comparison, error) {
	a, err := ReadAll(pathA)
	if err != nil {
		return nil, err
	}
	b, err := ReadAll(pathB)
	if err != nil {
		return nil, err
	}
	c := CompareTrajectories(a, b)
	c.A, c.B = pathA, pathB
	return c, nil
}

// CompareTrajectories compares two sets of trajectories (a is the reference).
func CompareTrajectories(a, b []*Trajectory) *Comparison {
	c := &Comparison{TrajectoriesA: len(a), TrajectoriesB: len(b), FieldDiffs: map[string]int{},
		OnlyInA: []string{}, OnlyInB: []string{}, LabelDiffs: []LabelDiff{}, FieldDiffSample: []FieldDiff{}}
	byID := make(map[string]*Trajectory, len(b))
	for _, t := range b {
		byID[t.ID] = t
	}
	seen := make(map[string]bool, len(a))
	for _, x := range a {
		seen[x.ID] = true
		y, ok := byID[x.ID]
		if !ok {
			c.OnlyInA = append(c.OnlyInA, x.ID)
			continue
		}
		c.Common++
		c.compareOne(x, y)
	}
	for _, y := range b {
		if !seen[y.ID] {
			c.OnlyInB = append(c.OnlyInB, y.ID)
		}
	}
	sort.Strings(c.OnlyInA)
	sort.Strings(c.OnlyInB)
	sort.Slice(c.LabelDiffs, func(i, j int) bool {
		if c.LabelDiffs[i].ID != c.LabelDiffs[j].ID {
			return c.LabelDiffs[i].ID < c.LabelDiffs[j].ID
		}
		return c.LabelDiffs[i].Turn < c.LabelDiffs[j].Turn
	})
	c.LabelAgreement = 1
	if c.Actions > 0 {
		c.LabelAgreement = float64(c.LabelAgree) / float64(c.Actions)
	}
	return c
}

func (c *Comparison) diff(id, field, a, b string) {
	c.FieldDiffs[field]++
	if len(c.FieldDiffSample) < maxFieldDiffSample {
		c.FieldDiffSample = append(c.FieldDiffSample, FieldDiff{ID: id, Field: field, A: clip(a), B: clip(b)})
	}
}

func (c *Comparison) compareOne(x, y *Trajectory) {
	str := func(field, a, b string) {
		if a != b {
			c.diff(x.ID, field, a, b)
		}
	}
	str("source", x.Source, y.Source)
	str("suite", x.Suite, y.Suite)
	str("user_task_id", x.UserTaskID, y.UserTaskID)
	str("model", x.Model, y.Model)
	str("user_prompt", x.UserPrompt, y.UserPrompt)
	str("injection_task_id", ptrText(x.InjectionTaskID), ptrText(y.InjectionTaskID))
	str("attack_type", ptrText(x.AttackType), ptrText(y.AttackType))
	str("utility", boolText(x.Utility), boolText(y.Utility))
	str("security", boolText(x.Security), boolText(y.Security))
	if len(x.Turns) != len(y.Turns) {
		c.diff(x.ID, "turns (count)", fmt.Sprint(len(x.Turns)), fmt.Sprint(len(y.Turns)))
	}
	n := max(len(x.Turns), len(y.Turns))
	c.Actions += n
	for i := 0; i < n; i++ {
		if i >= len(x.Turns) || i >= len(y.Turns) {
			d := LabelDiff{ID: x.ID, Turn: i, LabelA: -1, LabelB: -1}
			if i < len(x.Turns) {
				d.Action, d.LabelA = x.Turns[i].Action.Name, x.Turns[i].Label
			} else {
				d.Action, d.LabelB = y.Turns[i].Action.Name, y.Turns[i].Label
			}
			c.LabelDiffs = append(c.LabelDiffs, d)
			continue
		}
		u, v := &x.Turns[i], &y.Turns[i]
		if u.Label == v.Label {
			c.LabelAgree++
		} else {
			c.LabelDiffs = append(c.LabelDiffs, LabelDiff{ID: x.ID, Turn: i, Action: u.Action.Name, LabelA: u.Label, LabelB: v.Label})
		}
		p := fmt.Sprintf("turns[%d].", i)
		str("turns[].action.name", u.Action.Name, v.Action.Name)
		if !JSONEqual(u.Action.Arguments, v.Action.Arguments) {
			c.diff(x.ID, "turns[].action.arguments", p+string(u.Action.Arguments), p+string(v.Action.Arguments))
		}
		if u.Observation != v.Observation {
			c.diff(x.ID, "turns[].observation", p+u.Observation, p+v.Observation)
		}
		str("turns[].user", ptrText(u.User), ptrText(v.User))
	}
}

// WriteText prints a readable report: counts, agreement, every label
// difference (up to maxLabel) and the differing fields.
func (c *Comparison) WriteText(w io.Writer, maxLabel int) {
	fmt.Fprintf(w, "reference (A): %s: %d trajectories\n", c.A, c.TrajectoriesA)
	fmt.Fprintf(w, "compared (B):  %s: %d trajectories\n", c.B, c.TrajectoriesB)
	fmt.Fprintf(w, "ids: %d in both, %d only in A, %d only in B\n", c.Common, len(c.OnlyInA), len(c.OnlyInB))
	for _, id := range head(c.OnlyInA, 20) {
		fmt.Fprintf(w, "  only in A: %s\n", id)
	}
	for _, id := range head(c.OnlyInB, 20) {
		fmt.Fprintf(w, "  only in B: %s\n", id)
	}
	fmt.Fprintf(w, "labels: %d of %d actions agree (%.4f%%), %d differ\n",
		c.LabelAgree, c.Actions, 100*c.LabelAgreement, len(c.LabelDiffs))
	for i, d := range c.LabelDiffs {
		if i == maxLabel {
			fmt.Fprintf(w, "  ... %d more\n", len(c.LabelDiffs)-maxLabel)
			break
		}
		fmt.Fprintf(w, "  %s turn %d %s: A=%s B=%s\n", d.ID, d.Turn, d.Action, labelText(d.LabelA), labelText(d.LabelB))
	}
	if len(c.FieldDiffs) == 0 {
		fmt.Fprintln(w, "other fields: all equal")
		return
	}
	keys := slices.Sorted(maps.Keys(c.FieldDiffs))
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, c.FieldDiffs[k]))
	}
	fmt.Fprintf(w, "other fields differ: %s\n", strings.Join(parts, ", "))
	for _, d := range c.FieldDiffSample {
		fmt.Fprintf(w, "  %s %s:\n    A: %q\n    B: %q\n", d.ID, d.Field, d.A, d.B)
	}
}

func labelText(l int) string {
	if l < 0 {
		return "absent"
	}
	return fmt.Sprint(l)
}

func head(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func clip(s string) string {
	const n = 300
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func ptrText(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}

func boolText(p *bool) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}
