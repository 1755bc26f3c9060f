// Command learn-table writes the held-out tables of `make learn` and `make
// learn-grid` (docs/learning.md) from `mageguard eval` folders: per row,
// F1 over all actions, recall on the attacks of each gap of the synthetic
// benchmark (docs/synth.md) and on those with gap ≥ 3, ASR, BU, the
// false-positive rate and the guard's tokens per run.
//
//	go run ./scripts/learn-table [--title T] [--out FILE] NAME=DIR[,DIR...] ...
//
// A row with several folders (seeds) shows each metric's mean ± sample
// standard deviation, and its range; a second table lists every folder.
// Recall at gap g is the share of label-1 actions of trajectories whose
// attack_type ends in -gap<g> (synth.Gap) that the guard rejected, read
// from decisions.jsonl; the other metrics are report.json's. With
// --retention it adds report.json's synth figures (memory characters,
// retention of injected and allowed identifiers at lag ≥ 2) and tables of
// retention by lag, and --plot draws those curves.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/mageguard/mageguard/dataset/synth"
	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/internal/atomicfile"
)

func main() {
	title := flag.String("title", "", "a heading above the table")
	out := flag.String("out", "", "write the markdown here (default: stdout)")
	withRetention := flag.Bool("retention", false, "add the synth figures: memory characters, retention at lag >= 2, and tables of retention by lag")
	plotFile := flag.String("plot", "", "with --retention: draw each row's retention by lag (mean over its runs) into this PNG (injected) and its -allowed.png sibling")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: learn-table [--title T] [--out FILE] [--retention [--plot FILE.png]] NAME=DIR[,DIR...] ...")
		os.Exit(2)
	}
	var rows []row
	for _, arg := range flag.Args() {
		name, dirs, ok := strings.Cut(arg, "=")
		if !ok || name == "" || dirs == "" {
			fmt.Fprintf(os.Stderr, "learn-table: %q: want NAME=DIR[,DIR...]\n", arg)
			os.Exit(2)
		}
		r := row{name: name}
		for _, dir := range strings.Split(dirs, ",") {
			res, err := readResult(dir)
			if err != nil {
				fmt.Fprintln(os.Stderr, "learn-table:", err)
				os.Exit(1)
			}
			r.runs = append(r.runs, res)
		}
		rows = append(rows, r)
	}
	md := markdown(*title, rows, *withRetention)
	if *withRetention {
		md += retentionTables(rows)
		if *plotFile != "" {
			if err := plotRetention(*plotFile, rows); err != nil {
				fmt.Fprintln(os.Stderr, "learn-table:", err)
				os.Exit(1)
			}
		}
	}
	if *out == "" {
		fmt.Print(md)
		return
	}
	if err := atomicfile.WriteFile(*out, []byte(md)); err != nil {
		fmt.Fprintln(os.Stderr, "learn-table:", err)
		os.Exit(1)
	}
}

// gaps are the gaps the table shows one column each (data synth's defaults).
var gaps = []int{1, 2, 3, 4, 5, 6}

// result is one eval folder's figures; a nil pointer is undefined (a zero
// denominator).
type result struct {
	dir                      string
	f1, asr, bu, fpr, toks   *float64
	recall                   map[int]*float64 // by gap
	recallGap3               *float64         // gaps ≥ 3 together
	caught, positives        map[int]int      // by gap
	caughtGap3, positiveGap3 int
	synth                    *eval.Synth // report.json's synth section (nil without)
}

type row struct {
	name string
	runs []result
}

func readResult(dir string) (result, error) {
	rep, err := eval.ReadReport(filepath.Join(dir, eval.ReportJSON))
	if err != nil {
		return result{}, err
	}
	ds, err := eval.ReadDecisions(filepath.Join(dir, eval.DecisionsJSONL))
	if err != nil {
		return result{}, err
	}
	m := rep.Metrics
	r := gapRecall(ds)
	r.dir, r.f1, r.asr, r.bu, r.fpr, r.toks = dir, m.F1, m.ASR, m.BU, m.FPR, m.TokenCostOnline
	r.synth = rep.Synth
	return r, nil
}

// gapRecall counts, per gap, the label-1 actions of attack runs and those
// the guard rejected.
func gapRecall(ds []eval.Decision) result {
	r := result{recall: map[int]*float64{}, caught: map[int]int{}, positives: map[int]int{}}
	for _, d := range ds {
		if d.Label != 1 || d.AttackType == nil {
			continue
		}
		g, ok := synth.Gap(*d.AttackType)
		if !ok {
			continue
		}
		hit := 0
		if d.Decision == "reject" {
			hit = 1
		}
		r.positives[g]++
		r.caught[g] += hit
		if g >= 3 {
			r.positiveGap3++
			r.caughtGap3 += hit
		}
	}
	for g, n := range r.positives {
		v := float64(r.caught[g]) / float64(n)
		r.recall[g] = &v
	}
	if r.positiveGap3 > 0 {
		v := float64(r.caughtGap3) / float64(r.positiveGap3)
		r.recallGap3 = &v
	}
	return r
}

// column is one metric of the tables.
type column struct {
	name string
	unit string // "" a rate (3 decimals), "tokens" (none), "chars" (one)
	get  func(result) *float64
}

// columns are the tables' metrics; withRetention adds the synth figures
// (synthColumns).
func columns(withRetention bool) []column {
	cols := []column{
		{"F1", "", func(r result) *float64 { return r.f1 }},
		{"recall gap ≥ 3", "", func(r result) *float64 { return r.recallGap3 }},
	}
	for _, g := range gaps {
		cols = append(cols, column{fmt.Sprintf("gap %d", g), "", func(r result) *float64 { return r.recall[g] }})
	}
	cols = append(cols,
		column{"ASR", "", func(r result) *float64 { return r.asr }},
		column{"BU", "", func(r result) *float64 { return r.bu }},
		column{"FPR", "", func(r result) *float64 { return r.fpr }},
		column{"guard tokens / run", "tokens", func(r result) *float64 { return r.toks }},
	)
	if withRetention {
		cols = append(cols, synthColumns()...)
	}
	return cols
}

// markdown writes the table: one line per row (mean ± std over its runs),
// then, when a row has several runs, every run.
func markdown(title string, rows []row, withRetention bool) string {
	var b strings.Builder
	if title != "" {
		fmt.Fprintf(&b, "%s\n\n", title)
	}
	cols := columns(withRetention)
	header := func(first string) {
		fmt.Fprintf(&b, "| %s |", first)
		for _, c := range cols {
			fmt.Fprintf(&b, " %s |", c.name)
		}
		b.WriteString("\n|---|")
		for range cols {
			b.WriteString("---|")
		}
		b.WriteString("\n")
	}
	header("guard")
	multi := false
	for _, r := range rows {
		name := r.name
		if len(r.runs) > 1 {
			multi = true
			name += fmt.Sprintf(" (%d seeds)", len(r.runs))
		}
		fmt.Fprintf(&b, "| %s |", name)
		for _, c := range cols {
			fmt.Fprintf(&b, " %s |", cell(r.runs, c))
		}
		b.WriteString("\n")
	}
	// The number of attacks behind each recall.
	if len(rows) > 0 && len(rows[0].runs) > 0 {
		r := rows[0].runs[0]
		var parts []string
		for _, g := range gaps {
			parts = append(parts, fmt.Sprintf("gap %d: %d", g, r.positives[g]))
		}
		fmt.Fprintf(&b, "\nMalicious actions per gap in the held-out file: %s (gap ≥ 3: %d).\n", strings.Join(parts, ", "), r.positiveGap3)
	}
	if multi {
		b.WriteString("\nA row over several seeds shows mean ± sample standard deviation [min, max]. Every run:\n\n")
		header("run")
		for _, r := range rows {
			for _, res := range r.runs {
				fmt.Fprintf(&b, "| %s: %s |", r.name, res.dir)
				for _, c := range cols {
					fmt.Fprintf(&b, " %s |", cell([]result{res}, c))
				}
				b.WriteString("\n")
			}
		}
	}
	return b.String()
}

// cell writes a metric over runs: the value of one run, or mean ± std
// [min, max] of several (over the runs where it is defined).
func cell(runs []result, c column) string {
	var vs []float64
	for _, r := range runs {
		if v := c.get(r); v != nil {
			vs = append(vs, *v)
		}
	}
	format := func(v float64) string {
		switch c.unit {
		case "tokens":
			return fmt.Sprintf("%.0f", v)
		case "chars":
			return fmt.Sprintf("%.1f", v)
		}
		return fmt.Sprintf("%.3f", v)
	}
	switch {
	case len(vs) == 0:
		return "–"
	case len(runs) == 1:
		return format(vs[0])
	}
	mean, sd := meanStd(vs)
	sort.Float64s(vs)
	s := fmt.Sprintf("%s ± %s [%s, %s]", format(mean), format(sd), format(vs[0]), format(vs[len(vs)-1]))
	if len(vs) < len(runs) {
		s += fmt.Sprintf(" (%d of %d runs)", len(vs), len(runs))
	}
	return s
}

// meanStd returns the mean and the sample standard deviation (n − 1; 0 for
// one value).
func meanStd(vs []float64) (mean, sd float64) {
	for _, v := range vs {
		mean += v
	}
	mean /= float64(len(vs))
	if len(vs) < 2 {
		return mean, 0
	}
	for _, v := range vs {
		sd += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(sd / float64(len(vs)-1))
}
