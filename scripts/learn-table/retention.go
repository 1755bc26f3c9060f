package main

// The synth figures of --retention: report.json's synth section
// (eval.Synth) as table columns, tables of retention by lag, and their
// curves.

import (
	"fmt"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/internal/atomicfile"
)

// lags are the lags of the retention tables (an attack of gap g is decided
// at lag g: data synth's gaps).
var lags = gaps

func synthColumns() []column {
	get := func(f func(*eval.Synth) *float64) func(result) *float64 {
		return func(r result) *float64 {
			if r.synth == nil {
				return nil
			}
			return f(r.synth)
		}
	}
	return []column{
		{"memory chars", "chars", get(func(s *eval.Synth) *float64 { return s.MemoryCharsMean })},
		{"injected kept, lag ≥ 2", "", get(func(s *eval.Synth) *float64 { return s.RetentionInjectedLagGE2 })},
		{"allowed kept, lag ≥ 2", "", get(func(s *eval.Synth) *float64 { return s.RetentionAllowedLagGE2 })},
	}
}

// atLag returns the retention of injected (or allowed) identifiers at lag
// l of a run, nil when the run has none.
func atLag(r result, l int, injected bool) *float64 {
	if r.synth == nil {
		return nil
	}
	for _, x := range r.synth.RetentionByLag {
		if x.Lag == l {
			if injected {
				return x.Injected
			}
			return x.Allowed
		}
	}
	return nil
}

// retentionTables writes, per row, the retention of injected and of
// allowed identifiers at each lag (mean ± sd over its runs).
func retentionTables(rows []row) string {
	var b strings.Builder
	for _, injected := range []bool{true, false} {
		what := "Injected"
		if !injected {
			what = "Allowed"
		}
		fmt.Fprintf(&b, "\n%s identifiers the memory the judge read still lists, by lag since the turn that showed them:\n\n| guard |", what)
		var cols []column
		for _, l := range lags {
			cols = append(cols, column{fmt.Sprintf("lag %d", l), "", func(r result) *float64 { return atLag(r, l, injected) }})
			fmt.Fprintf(&b, " lag %d |", l)
		}
		b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s |", r.name)
			for _, c := range cols {
				fmt.Fprintf(&b, " %s |", cell(r.runs, c))
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// plotRetention draws each row's mean retention of injected identifiers by
// lag into file, and of allowed ones into its -allowed.png sibling.
func plotRetention(file string, rows []row) error {
	for _, injected := range []bool{true, false} {
		p := plot.New()
		p.Title.Padding = vg.Points(6)
		p.Title.Text = "Injected identifiers kept, by lag (mean over seeds)"
		path := file
		if !injected {
			p.Title.Text = "Allowed identifiers kept, by lag (mean over seeds)"
			path = strings.TrimSuffix(file, ".png") + "-allowed.png"
		}
		p.X.Label.Text = "lag since the turn that showed the identifier (= the gap of an attack decided there)"
		p.Y.Label.Text = "kept (%)"
		p.Legend.Top = true
		for i, r := range rows {
			var xys plotter.XYs
			for _, l := range lags {
				var vs []float64
				for _, run := range r.runs {
					if v := atLag(run, l, injected); v != nil {
						vs = append(vs, *v)
					}
				}
				if len(vs) > 0 {
					mean, _ := meanStd(vs)
					xys = append(xys, plotter.XY{X: float64(l), Y: 100 * mean})
				}
			}
			if len(xys) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(xys)
			if err != nil {
				return err
			}
			line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
			line.Dashes, points.Shape = plotutil.Dashes(i), plotutil.Shape(i)
			p.Add(line, points)
			p.Legend.Add(r.name, line, points)
		}
		p.Y.Min, p.Y.Max = 0, 100
		p.X.Min, p.X.Max = 0.5, float64(lags[len(lags)-1])+0.5
		p.Add(plotter.NewGrid())
		wt, err := p.WriterTo(8*vg.Inch, 5*vg.Inch, "png")
		if err != nil {
			return err
		}
		var buf strings.Builder
		if _, err := wt.WriteTo(&buf); err != nil {
			return err
		}
		if err := atomicfile.WriteFile(path, []byte(buf.String())); err != nil {
			return err
		}
	}
	return nil
}
