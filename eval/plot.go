package eval

import (
	"fmt"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/mageguard/mageguard/internal/chart"
)

// plotHorizon draws ASR and BU (in %) against the attack horizon: a point
// where a metric is defined (no ASR at horizon 0, where no action is
// malicious and it is 0 by definition), lines only between adjacent
// horizons (none across a horizon without runs), and each horizon's number
// of runs under it.
func plotHorizon(r Report) ([]byte, error) {
	p := chart.New("ASR and BU by horizon")
	p.X.Label.Text = "horizon (malicious actions in the run)"
	p.Y.Label.Text = "%"
	var hs []int
	for k := range r.ByHorizon {
		if h, err := strconv.Atoi(k); err == nil {
			hs = append(hs, h)
		}
	}
	sort.Ints(hs)
	asr, bu := horizonPoints(r, hs)
	drawn := false
	for i, s := range []struct {
		name string
		xys  plotter.XYs
	}{{"ASR", asr}, {"BU", bu}} {
		line, err := chart.AddSeriesGaps(p, s.name, s.xys, i, 1)
		if err != nil {
			return nil, err
		}
		drawn = drawn || line != nil
	}
	if !drawn {
		chart.NoData(p)
	} else {
		p.Y.Min, p.Y.Max = 0, 104 // room for the points at 100%
		p.Y.Tick.Marker = plot.ConstantTicks{{Value: 0, Label: "0"}, {Value: 25, Label: "25"},
			{Value: 50, Label: "50"}, {Value: 75, Label: "75"}, {Value: 100, Label: "100"}}
		p.X.Min, p.X.Max = float64(hs[0])-0.5, float64(hs[len(hs)-1])+0.5
		runs := map[float64]string{}
		for v := hs[0]; v <= hs[len(hs)-1]; v++ {
			runs[float64(v)] = fmt.Sprintf("%d\n(no runs)", v)
		}
		for _, h := range hs {
			m := r.ByHorizon[strconv.Itoa(h)]
			runs[float64(h)] = fmt.Sprintf("%d\n(%d %s)", h, m.NAttack+m.NBenign, plural(m.NAttack+m.NBenign, "run", "runs"))
		}
		p.X.Tick.Marker = chart.IntegerTicks{Labels: runs}
	}
	p.Add(plotter.NewGrid())
	return chart.PNG(p)
}

// horizonPoints returns the ASR and BU points (in %) of the horizons hs
// where each is defined: ASR not at horizon 0, where no action is malicious.
func horizonPoints(r Report, hs []int) (asr, bu plotter.XYs) {
	for _, h := range hs {
		m := r.ByHorizon[strconv.Itoa(h)]
		if m.ASR != nil && h > 0 {
			asr = append(asr, plotter.XY{X: float64(h), Y: 100 * *m.ASR})
		}
		if m.BU != nil {
			bu = append(bu, plotter.XY{X: float64(h), Y: 100 * *m.BU})
		}
	}
	return asr, bu
}

// plural returns one when n is 1, else many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// plotLatency draws the detection-latency histogram as bars, one per
// latency from the smallest to the largest seen.
func plotLatency(hist []LatencyCount) ([]byte, error) {
	p := chart.New("Detection latency (first reject − first malicious turn)")
	p.X.Label.Text = "latency (turns; negative = early warning)"
	p.Y.Label.Text = "attack runs"
	if len(hist) == 0 {
		chart.NoData(p)
		return chart.PNG(p)
	}
	lo, hi := hist[0].Latency, hist[len(hist)-1].Latency
	counts := make(plotter.Values, hi-lo+1)
	names := make([]string, hi-lo+1)
	for i := range names {
		names[i] = fmt.Sprintf("%+d", lo+i)
	}
	for _, h := range hist {
		counts[h.Latency-lo] = float64(h.Count)
	}
	bars, err := plotter.NewBarChart(counts, vg.Points(min(20, 400/float64(len(counts)))))
	if err != nil {
		return nil, err
	}
	bars.Color = plotutil.Color(0)
	bars.LineStyle.Width = 0
	p.Add(bars)
	p.NominalX(names...)
	p.Y.Min = 0
	return chart.PNG(p)
}

// perTask returns, for each trajectory of ds, its number of turns and its
// guard tokens over all turns.
func perTask(ds []Decision) plotter.XYs {
	var xys plotter.XYs
	for _, t := range group(ds) {
		sum := 0
		for _, d := range t.turns {
			sum += d.GuardTokens
		}
		xys = append(xys, plotter.XY{X: float64(len(t.turns)), Y: float64(sum)})
	}
	return xys
}

// meanByX averages the Y values of points with the same X, sorted by X.
func meanByX(xys plotter.XYs) plotter.XYs {
	sum, n := map[float64]float64{}, map[float64]int{}
	for _, p := range xys {
		sum[p.X] += p.Y
		n[p.X]++
	}
	var out plotter.XYs
	for x := range sum {
		out = append(out, plotter.XY{X: x, Y: sum[x] / float64(n[x])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].X < out[j].X })
	return out
}

// plotTokensPerTask draws each task's guard tokens (all turns) against its
// number of turns, with the mean per length as a line: for this run and, when
// given, the baseline (judge-only grows quadratically, MAGE linearly).
func plotTokensPerTask(ds []Decision, opts ReportOptions) ([]byte, error) {
	p := chart.New("Guard tokens per task (all turns, both roles, system prompts included)")
	p.X.Label.Text = "turns in the task"
	p.Y.Label.Text = "guard tokens"
	sets := []struct {
		name string
		ds   []Decision
	}{{opts.Name, ds}}
	if opts.Baseline != nil {
		sets = append(sets, struct {
			name string
			ds   []Decision
		}{opts.BaselineName, opts.Baseline})
	}
	drawn, maxX := false, 0.0
	for i, s := range sets {
		xys := perTask(s.ds)
		if len(xys) == 0 {
			continue
		}
		drawn = true
		c := plotutil.Color(i)
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, err
		}
		sc.Color = chart.WithAlpha(c, 0x60)
		sc.Shape = plotutil.Shape(i)
		// The mean per length, joined only between adjacent lengths: no
		// line across a length without tasks.
		var line *plotter.Line
		for _, seg := range chart.Segments(meanByX(xys), 1) {
			if len(seg) == 1 { // a lone length: its mean as a short bar
				seg = plotter.XYs{{X: seg[0].X - 0.15, Y: seg[0].Y}, {X: seg[0].X + 0.15, Y: seg[0].Y}}
			}
			l, err := plotter.NewLine(seg)
			if err != nil {
				return nil, err
			}
			l.Color, l.Width = c, vg.Points(2)
			p.Add(l)
			line = l
		}
		p.Add(sc)
		p.Legend.Add(s.name, sc, line)
		for _, xy := range xys {
			maxX = max(maxX, xy.X)
		}
	}
	if !drawn {
		chart.NoData(p)
	} else {
		p.X.Min, p.X.Max, p.Y.Min = 0, maxX+0.5, 0 // room for the points at the longest task
		p.Y.Tick.Marker = chart.PlainTicks{}
		p.X.Tick.Marker = chart.IntegerTicks{}
	}
	p.Add(plotter.NewGrid())
	return chart.PNG(p)
}
