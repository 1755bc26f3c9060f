package dataset

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// synth makes a trajectory with n actions of which pos are labeled 1.
func synth(suite string, task, idx int, attack bool, n, pos int) *Trajectory {
	t := &Trajectory{ID: fmt.Sprintf("%s:%d:%d:%v", suite, task, idx, attack), Source: "test", Suite: suite,
		UserTaskID: fmt.Sprintf("user_task_%d", task), Model: "m", Turns: []Turn{}}
	if attack {
		inj := "injection_task_0"
		t.InjectionTaskID = &inj
	}
	for i := 0; i < n; i++ {
		l := 0
		if i < pos {
			l = 1
		}
		t.Turns = append(t.Turns, Turn{Action: Action{Name: "f", Arguments: []byte("{}")}, Observation: strings.Repeat("o", i), Label: l})
	}
	return t
}

// synthSet: suites with tasks, each task with 3 attack runs and 1 benign run.
func synthSet(suites []string, tasks int) []*Trajectory {
	var out []*Trajectory
	for _, s := range suites {
		for k := 0; k < tasks; k++ {
			for i := 0; i < 3; i++ {
				out = append(out, synth(s, k, i, true, i+1, i%2))
			}
			out = append(out, synth(s, k, 9, false, 2, 0))
		}
	}
	return out
}

func TestSplitIsTaskDisjointBalancedAndDeterministic(t *testing.T) {
	all := synthSet([]string{"banking", "slack", "travel", "workspace"}, 10)
	train, eval, err := Split(all, 0.3, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(train)+len(eval) != len(all) {
		t.Fatalf("lost records: %d + %d != %d", len(train), len(eval), len(all))
	}
	trainTasks := map[string]bool{}
	for _, x := range train {
		trainTasks[x.TaskKey()] = true
	}
	for _, x := range eval {
		if trainTasks[x.TaskKey()] {
			t.Errorf("task %s on both sides", x.TaskKey())
		}
	}
	for _, side := range [][]*Trajectory{train, eval} {
		s := NewStats("")
		for _, x := range side {
			s.Add(x)
		}
		for _, suite := range []string{"banking", "slack", "travel", "workspace"} {
			g := s.BySuite[suite]
			if g == nil || g.Attack == 0 || g.Benign == 0 {
				t.Errorf("suite %s lacks attack or benign runs on one side: %+v", suite, g)
			}
		}
	}
	// eval holds at least 30% of each suite, and not much more (4 of 10 tasks).
	if len(eval) < 48 || len(eval) > 64 {
		t.Errorf("eval has %d of %d", len(eval), len(all))
	}
	// Input order is kept on each side.
	pos := map[string]int{}
	for i, x := range all {
		pos[x.ID] = i
	}
	for _, side := range [][]*Trajectory{train, eval} {
		if !slices.IsSortedFunc(side, func(a, b *Trajectory) int { return pos[a.ID] - pos[b.ID] }) {
			t.Error("input order not kept")
		}
	}
	// Deterministic, and independent of the input order.
	rev := slices.Clone(all)
	slices.Reverse(rev)
	_, eval2, _ := Split(rev, 0.3, 7)
	if !sameIDs(eval, eval2) {
		t.Error("same seed, different split")
	}
	_, eval3, _ := Split(all, 0.3, 8)
	if sameIDs(eval, eval3) {
		t.Log("seeds 7 and 8 gave the same split (possible, unlikely)")
	}
}

func sameIDs(a, b []*Trajectory) bool {
	x, y := map[string]bool{}, map[string]bool{}
	for _, t := range a {
		x[t.ID] = true
	}
	for _, t := range b {
		y[t.ID] = true
	}
	if len(x) != len(y) {
		return false
	}
	for k := range x {
		if !y[k] {
			return false
		}
	}
	return true
}

func TestSplitErrors(t *testing.T) {
	one := synthSet([]string{"banking"}, 1)
	if _, _, err := Split(one, 0.3, 1); err == nil || !strings.Contains(err.Error(), `suite "banking"`) {
		t.Errorf("single-task suite: %v", err)
	}
	// Only one task of slack has a benign run: no split puts benign on both sides.
	var s []*Trajectory
	for k := 0; k < 4; k++ {
		s = append(s, synth("slack", k, 0, true, 1, 0))
	}
	s = append(s, synth("slack", 0, 1, false, 1, 0))
	if _, _, err := Split(s, 0.3, 1); err == nil || !strings.Contains(err.Error(), `suite "slack"`) {
		t.Errorf("impossible split: %v", err)
	}
	for _, f := range []float64{0, 1, -0.1, 1.5} {
		if _, _, err := Split(synthSet([]string{"b"}, 4), f, 1); err == nil {
			t.Errorf("eval fraction %v accepted", f)
		}
	}
}

func TestStats(t *testing.T) {
	var ts []*Trajectory
	// turn counts at every bucket boundary
	for i, n := range []int{0, 1, 2, 3, 4, 5, 6, 8, 9, 12, 13, 20, 21, 30} {
		ts = append(ts, synth("slack", i, 0, i%2 == 0, n, 0))
	}
	ts = append(ts, synth("banking", 0, 1, true, 3, 2), synth("banking", 0, 2, false, 1, 0))
	s := NewStats("x")
	for _, x := range ts {
		s.Add(x)
	}
	s.Finish()
	wantHist := []int{1, 2, 1, 2, 2, 2, 2, 2, 2} // banking adds a 3 and a 1
	for i, b := range s.TurnHistogram {
		if b.Trajectories != wantHist[i] {
			t.Errorf("bucket %s: %d, want %d", b.Turns, b.Trajectories, wantHist[i])
		}
	}
	if s.Trajectories != 16 || s.Attack != 8 || s.Benign != 8 || s.Positives != 2 || s.ZeroAction != 1 || s.Tasks != 15 {
		t.Errorf("totals: %+v", s)
	}
	if g := s.BySuite["banking"]; g.Attack != 1 || g.Benign != 1 || g.Actions != 4 || g.Positives != 2 || g.Tasks != 1 {
		t.Errorf("banking: %+v", g)
	}
	h := s.AttackHorizon
	if h.WithAny != 1 || len(h.Histogram) != 2 || h.Histogram[0] != (HorizonCount{0, 7}) || h.Histogram[1] != (HorizonCount{2, 1}) || h.Mean != 0.25 {
		t.Errorf("horizon: %+v", h)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"file", "trajectories", "attack", "benign", "zero_action_trajectories", "actions", "positives",
		"tasks", "by_suite", "by_model", "by_attack_type", "turns_histogram", "attack_horizon"} {
		if _, ok := m[k]; !ok {
			t.Errorf("stats JSON lacks key %q", k)
		}
	}
	var text strings.Builder
	s.WriteText(&text)
	if !strings.Contains(text.String(), "turns per trajectory: 0: 1, 1: 2, 2: 1, 3: 2, 4-5: 2") {
		t.Errorf("text:\n%s", text.String())
	}
}

func TestSubset(t *testing.T) {
	all := synthSet([]string{"banking", "slack"}, 10) // attack runs have 1..3 turns; observations up to 2 chars
	o := SubsetOptions{MaxTurns: 2, AttackPerSuite: 5, BenignPerSuite: 3, PositiveFrac: -1, Seed: 3}
	a, err := Subset(all, o)
	if err != nil {
		t.Fatal(err)
	}
	s := NewStats("")
	for _, x := range a {
		s.Add(x)
		if len(x.Turns) > 2 {
			t.Errorf("%s has %d turns", x.ID, len(x.Turns))
		}
	}
	for _, suite := range []string{"banking", "slack"} {
		if g := s.BySuite[suite]; g.Attack != 5 || g.Benign != 3 {
			t.Errorf("%s: %+v", suite, g)
		}
	}
	b, _ := Subset(all, o)
	if !sameIDs(a, b) {
		t.Error("same seed, different subset")
	}
	o.PositiveFrac = 1
	c, _ := Subset(all, o)
	for _, x := range c {
		if x.IsAttack() && x.Positives() == 0 {
			t.Errorf("%s: no positive with positive-frac 1", x.ID)
		}
	}
	o = SubsetOptions{MaxObservationChars: 0, AttackPerSuite: 100, BenignPerSuite: 100, PositiveFrac: -1}
	o.MaxObservationChars = 1
	d, _ := Subset(all, o)
	for _, x := range d {
		if len(x.Turns) > 2 {
			t.Errorf("%s: observation longer than 1 kept", x.ID)
		}
	}
}

func TestCompare(t *testing.T) {
	a := synthSet([]string{"banking"}, 2)
	var b []*Trajectory
	for _, x := range a[1:] { // drop one
		y := *x
		y.Turns = slices.Clone(x.Turns)
		b = append(b, &y)
	}
	b = append(b, synth("banking", 5, 0, true, 1, 0)) // extra
	b[0].Turns[0].Label = 1 - b[0].Turns[0].Label     // one label differs
	b[1].Turns[0].Observation = "changed"
	c := CompareTrajectories(a, b)
	if len(c.OnlyInA) != 1 || len(c.OnlyInB) != 1 || c.Common != len(a)-1 || len(c.LabelDiffs) != 1 || c.FieldDiffs["turns[].observation"] != 1 {
		t.Errorf("comparison: %+v", c)
	}
	if c.LabelAgree != c.Actions-1 {
		t.Errorf("agree %d of %d", c.LabelAgree, c.Actions)
	}
}

// The bundled default data is valid, split by task, with every suite on both
// sides with attack and benign runs, and carries its licence.
func TestBundledMiniData(t *testing.T) {
	dir := filepath.Join("..", "data", "agentdojo-mini")
	train, err := ReadAll(filepath.Join(dir, "train.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	eval, err := ReadAll(filepath.Join(dir, "eval.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	tasks := map[string]bool{}
	ids := map[string]bool{}
	for _, x := range train {
		tasks[x.TaskKey()] = true
		ids[x.ID] = true
	}
	for _, x := range eval {
		if tasks[x.TaskKey()] || ids[x.ID] {
			t.Errorf("%s: task or id on both sides", x.ID)
		}
	}
	if n := len(train) + len(eval); n < 200 || n > 1000 {
		t.Errorf("%d trajectories: want a few hundred", n)
	}
	for name, side := range map[string][]*Trajectory{"train": train, "eval": eval} {
		s := NewStats(name)
		for _, x := range side {
			s.Add(x)
		}
		for _, suite := range []string{"banking", "slack", "travel", "workspace"} {
			g := s.BySuite[suite]
			if g == nil || g.Attack == 0 || g.Benign == 0 || g.Positives == 0 {
				t.Errorf("%s: suite %s: %+v", name, suite, g)
			}
		}
	}
	lic, err := os.ReadFile(filepath.Join(dir, "LICENSE"))
	if err != nil || !strings.Contains(string(lic), "MIT") {
		t.Errorf("LICENSE: %v", err)
	}
}
