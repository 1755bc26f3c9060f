package main

import (
	"strings"
	"testing"

	"github.com/mageguard/mageguard/eval"
)

func decision(attackType string, label int, d string) eval.Decision {
	var at *string
	if attackType != "" {
		at = &attackType
	}
	return eval.Decision{AttackType: at, Attack: at != nil, Label: label, Decision: d}
}

// TestGapRecallCountsMaliciousActionsByGap: recall per gap sums over the
// suites; label-0 actions, benign runs and ignored injections do not count.
func TestGapRecallCountsMaliciousActionsByGap(t *testing.T) {
	r := gapRecall([]eval.Decision{
		decision("injected-payee-gap3", 1, "reject"),
		decision("injected-site-gap3", 1, "approve"),
		decision("injected-site-gap3", 0, "reject"), // a benign action of an attack run
		decision("injected-recipient-gap5", 1, "reject"),
		decision("injected-payee-gap1", 1, "reject"),
		decision("injected-payee-gap2", 1, "approve"),
		decision("injected-payee-ignored", 0, "reject"),
		decision("", 0, "approve"),
	})
	want := map[int]float64{1: 1, 2: 0, 3: 0.5, 5: 1}
	for g, w := range want {
		if v := r.recall[g]; v == nil || *v != w {
			t.Errorf("gap %d: recall %v, want %v", g, v, w)
		}
	}
	if r.recall[4] != nil || r.recall[6] != nil {
		t.Error("a recall for a gap without attacks")
	}
	// Gap ≥ 3: 3 malicious actions (two of gap 3, one of gap 5), 2 caught.
	if r.positiveGap3 != 3 || r.caughtGap3 != 2 || *r.recallGap3 != 2.0/3 {
		t.Errorf("gap >= 3: %d of %d, recall %v", r.caughtGap3, r.positiveGap3, *r.recallGap3)
	}
}

// TestCellShowsMeanStdAndRange: one run shows its value; several show the
// mean, the sample standard deviation and the range, over the runs where
// the metric is defined.
func TestCellShowsMeanStdAndRange(t *testing.T) {
	v := func(x float64) *float64 { return &x }
	c := column{get: func(r result) *float64 { return r.f1 }}
	if got := cell([]result{{f1: v(0.9)}}, c); got != "0.900" {
		t.Errorf("one run: %q", got)
	}
	// 0.8, 0.9, 1.0: mean 0.9, sample std 0.1.
	if got := cell([]result{{f1: v(0.8)}, {f1: v(1.0)}, {f1: v(0.9)}}, c); got != "0.900 ± 0.100 [0.800, 1.000]" {
		t.Errorf("three runs: %q", got)
	}
	if got := cell([]result{{f1: v(0.5)}, {f1: nil}}, c); !strings.HasSuffix(got, "(1 of 2 runs)") {
		t.Errorf("an undefined run: %q", got)
	}
	if got := cell([]result{{}}, c); got != "–" {
		t.Errorf("undefined: %q", got)
	}
}

// TestRetentionTables: --retention adds the synth figures as columns and a
// table of retention by lag per row, the mean ± sd over its runs (here
// injected at lag 2: 1 and 0, mean 0.5, sd √0.5 = 0.707); a run without
// the lag shows as undefined.
func TestRetentionTables(t *testing.T) {
	v := func(x float64) *float64 { return &x }
	run := func(inj2, all2, chars float64) result {
		return result{synth: &eval.Synth{MemoryCharsMean: v(chars), RetentionInjectedLagGE2: v(inj2), RetentionAllowedLagGE2: v(all2),
			RetentionByLag: []eval.LagRetention{{Lag: 1, Injected: v(1), Allowed: v(1)}, {Lag: 2, Injected: v(inj2), Allowed: v(all2)}}}}
	}
	rows := []row{{name: "warm", runs: []result{run(0.5, 0.5, 15)}}, {name: "cell", runs: []result{run(1, 0.25, 20), run(0, 0.75, 30)}}}
	md := markdown("", rows, true) + retentionTables(rows)
	for _, want := range []string{
		"| FPR | guard tokens / run | memory chars | injected kept, lag ≥ 2 | allowed kept, lag ≥ 2 |",
		"| 25.0 ± 7.1 [20.0, 30.0] | 0.500 ± 0.707 [0.000, 1.000] | 0.500 ± 0.354 [0.250, 0.750] |",
		"Injected identifiers the memory the judge read still lists",
		"| cell | 1.000 ± 0.000 [1.000, 1.000] | 0.500 ± 0.707 [0.000, 1.000] | – | – | – | – |",
		"| warm | 1.000 | 0.500 | – |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
