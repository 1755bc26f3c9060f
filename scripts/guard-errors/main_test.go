package main

import (
	"slices"
	"testing"

	"github.com/mageguard/mageguard/dataset/synth"
	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/train/teacher"
)

// TestCountsAgainstThePerfectGuard: decisions whose memories are the
// perfect teacher's and whose decisions are the rule's count as all right;
// one injection call that forgets its injected identifier counts as one
// memory error of that kind — not of the calls after it, which copy what
// they were shown — and the approve of the malicious action it leads to
// agrees with the rule on the memory the judge read.
func TestCountsAgainstThePerfectGuard(t *testing.T) {
	o := synth.DefaultOptions()
	o.N, o.Seed = 12, 7
	trajs, err := synth.Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	var ds []eval.Decision
	injections, broken := 0, -1
	for _, tr := range trajs {
		mems, err := teacher.Synth{}.Memories(tr, 0, len(tr.Turns))
		if err != nil {
			t.Fatal(err)
		}
		for turn, m := range mems {
			d, _ := teacher.Judge(m, tr.Turns[turn].Action)
			if turn > 0 && hasInjection(tr.Turns[turn-1].Observation) {
				injections++
			}
			ds = append(ds, eval.Decision{TrajectoryID: tr.ID, Turn: turn, Label: tr.Turns[turn].Label, Decision: d, Memory: m})
		}
	}
	c, err := count(trajs, ds, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.trajectories != len(trajs) || c.calls != len(ds) || c.agree != len(ds) || c.memory["injection"].n != injections || injections == 0 {
		t.Fatalf("perfect guard: %+v (%d decisions, %d injection calls)", c, len(ds), injections)
	}
	for k, tl := range c.memory {
		if tl.exact != tl.n || tl.injected != tl.n {
			t.Errorf("perfect guard: %s calls %+v", k, *tl)
		}
	}
	// Break the first attack whose injection is read before its malicious action.
	for i := range ds {
		tr := trajs[0]
		for _, x := range trajs {
			if x.ID == ds[i].TrajectoryID {
				tr = x
			}
		}
		if ds[i].Turn > 0 && hasInjection(tr.Turns[ds[i].Turn-1].Observation) && ds[i].Label == 0 {
			broken = i
			break
		}
	}
	if broken < 0 {
		t.Fatal("no injection call to break")
	}
	id := ds[broken].TrajectoryID
	forgot := 0
	for i := broken; i < len(ds) && ds[i].TrajectoryID == id; i++ {
		m := synth.ParseMemory(ds[i].Memory)
		m.Entries = slices.DeleteFunc(m.Entries, func(e synth.Entry) bool { return e.Role == synth.RoleInjected })
		ds[i].Memory = m.String()
		if ds[i].Label == 1 {
			ds[i].Decision = teacher.Approve // the rule on the forgetful memory
		}
		forgot++
	}
	if c, err = count(trajs, ds, 0); err != nil {
		t.Fatal(err)
	}
	if inj := c.memory["injection"]; inj.exact != inj.n-1 || inj.injected != inj.n-1 {
		t.Errorf("one forgetful injection call: injection calls %+v, want one wrong", *inj)
	}
	if other := c.memory["other"]; other.exact != other.n {
		t.Errorf("the %d calls after it copy what they were shown, yet other calls %+v", forgot-1, *other)
	}
	if c.agree != len(ds) {
		t.Errorf("the rule on the memory read: %d of %d agree, want all (approving was the rule on that memory)", c.agree, len(ds))
	}
}
