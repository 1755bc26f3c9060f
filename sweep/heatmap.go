package sweep

import (
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette/brewer"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/internal/chart"
)

// axisValues lists each swept key's values in grid order, recovered from
// the points (the first point with a value fixes its position).
func axisValues(p *Schedule) [][]string {
	out := make([][]string, len(p.Keys))
	seen := make([]map[string]bool, len(p.Keys))
	for k := range seen {
		seen[k] = map[string]bool{}
	}
	for _, pt := range p.Points {
		for k, v := range pt.Values {
			if !seen[k][v] {
				seen[k][v] = true
				out[k] = append(out[k], v)
			}
		}
	}
	return out
}

// cellGrid is a heatmap's values, z[row][col] (NaN = no finished point).
type cellGrid struct{ z [][]float64 }

func (g cellGrid) Dims() (c, r int)   { return len(g.z[0]), len(g.z) }
func (g cellGrid) Z(c, r int) float64 { return g.z[r][c] }
func (g cellGrid) X(c int) float64    { return float64(c) }
func (g cellGrid) Y(r int) float64    { return float64(r) }

// colors is a palette of fixed colors.
type colors []color.Color

func (c colors) Colors() []color.Color { return c }

// cells averages metric over the points of each heatmap cell. Columns are
// the values of the second swept key and rows those of the first; with one
// key there is a single row (rowKey = -1); with more than two, a cell is the
// mean over the points that share its two values. A cell without a finished
// point (or with only null metrics) is NaN.
func (s *Summary) cells(metric string) (z [][]float64, colKey, rowKey int, kind eval.Kind) {
	z, _, _, colKey, rowKey, kind = s.cellStats(metric)
	return z, colKey, rowKey, kind
}

// cellStats returns, per heatmap cell (see cells), the mean of metric over
// the cell's points, the spread (the sample standard deviation; NaN for
// fewer than two points) and the number of points with a value.
func (s *Summary) cellStats(metric string) (mean, sd [][]float64, n [][]int, colKey, rowKey int, kind eval.Kind) {
	p := s.Schedule
	vals := axisValues(p)
	colKey, rowKey = 0, -1
	if len(p.Keys) >= 2 {
		colKey, rowKey = 1, 0
	}
	nCols, nRows := len(vals[colKey]), 1
	if rowKey >= 0 {
		nRows = len(vals[rowKey])
	}
	index := func(k int, v string) int {
		for i, x := range vals[k] {
			if x == v {
				return i
			}
		}
		return -1
	}
	values := make([][][]float64, nRows)
	for r := range values {
		values[r] = make([][]float64, nCols)
	}
	kind = metricKind(metric)
	for i, pt := range p.Points {
		f := field(s.Reports[i], metric)
		if f.Value == nil {
			continue
		}
		c, r := index(colKey, pt.Values[colKey]), 0
		if rowKey >= 0 {
			r = index(rowKey, pt.Values[rowKey])
		}
		values[r][c] = append(values[r][c], *f.Value)
	}
	mean, sd, n = make([][]float64, nRows), make([][]float64, nRows), make([][]int, nRows)
	for r := range values {
		mean[r], sd[r], n[r] = make([]float64, nCols), make([]float64, nCols), make([]int, nCols)
		for c, vs := range values[r] {
			mean[r][c], sd[r][c], n[r][c] = meanSD(vs)
		}
	}
	return mean, sd, n, colKey, rowKey, kind
}

// meanSD returns the mean and the sample standard deviation (n − 1) of vs:
// NaN for a mean of none, a spread of fewer than two.
func meanSD(vs []float64) (mean, sd float64, n int) {
	mean, sd, n = math.NaN(), math.NaN(), len(vs)
	if n == 0 {
		return mean, sd, n
	}
	sum := 0.0
	for _, v := range vs {
		sum += v
	}
	mean = sum / float64(n)
	if n < 2 {
		return mean, sd, n
	}
	ss := 0.0
	for _, v := range vs {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss / float64(n-1)), n
}

// heatmap draws cells(metric) as a PNG heatmap with each cell's value
// written on it and its colour scale beside it; a cell without a finished
// point is grey and says "not run", one whose points finished with the
// metric null is white and says "no value".
// Colours run from light yellow to red, red where the metric is worst
// (higherIsBetter reverses the scale).
func (s *Summary) heatmap(metric, title string, higherIsBetter bool) ([]byte, error) {
	return s.draw(metric, title, higherIsBetter, false)
}

// draw draws the heatmap of metric's mean per cell or, with spread, of its
// spread over the cell's points (red where it is largest; a cell of one
// point says "1 point").
func (s *Summary) draw(metric, title string, higherIsBetter, spread bool) ([]byte, error) {
	p := s.Schedule
	vals := axisValues(p)
	mean, sd, n, colKey, rowKey, kind := s.cellStats(metric)
	z := mean
	if spread {
		z, higherIsBetter = sd, false
	}
	nRows, nCols := len(z), len(z[0])
	g := cellGrid{z: z}
	lo, hi := math.Inf(1), math.Inf(-1)
	var labels plotter.XYLabels
	finished := s.finishedCells(colKey, rowKey, nRows, nCols)
	var noValue []plotter.XY // finished cells whose metric is null
	for r := range z {
		for c, v := range z[r] {
			label := "not run"
			switch {
			case !math.IsNaN(v):
				lo, hi = math.Min(lo, v), math.Max(hi, v)
				label = eval.Format(eval.Field{Kind: kind, Value: &v})
			case spread && n[r][c] == 1:
				label = "1 point"
			case finished[r][c] > 0 && n[r][c] == 0:
				label = "no value"
				noValue = append(noValue, plotter.XY{X: float64(c), Y: float64(r)})
			}
			labels.XYs = append(labels.XYs, plotter.XY{X: float64(c), Y: float64(r)})
			labels.Labels = append(labels.Labels, label)
		}
	}

	pal, err := brewer.GetPalette(brewer.TypeSequential, "YlOrRd", 9)
	if err != nil {
		return nil, err
	}
	cols := append(colors{}, pal.Colors()[:7]...) // the lighter 7 of 9: labels stay readable
	if higherIsBetter {
		for i, j := 0, len(cols)-1; i < j; i, j = i+1, j-1 {
			cols[i], cols[j] = cols[j], cols[i]
		}
	}
	hm := plotter.NewHeatMap(g, cols)
	hm.NaN = notRunColor
	switch {
	case kind == eval.Rate && !spread:
		hm.Min, hm.Max = 0, 1 // rates on one scale across sweeps
	case lo > hi: // nothing finished
		hm.Min, hm.Max = 0, 1
	case spread:
		hm.Min, hm.Max = 0, math.Max(hi, 1e-9) // no spread is the lightest
	case lo == hi:
		hm.Min, hm.Max = lo-1, hi+1
	default:
		hm.Min, hm.Max = lo, hi
	}

	pl := chart.New(title + " by " + p.ShortKeys[colKey])
	if rowKey >= 0 {
		pl.Title.Text = title + " by " + p.ShortKeys[rowKey] + " × " + p.ShortKeys[colKey]
	}
	if len(p.Keys) > 2 {
		over := "mean"
		if spread {
			over = "spread (sd)"
		}
		pl.Title.Text += " (" + over + " over " + strings.Join(p.ShortKeys[2:], ", ") + ")"
	}
	pl.Add(hm)
	for _, xy := range noValue { // finished, metric null: white, apart from the grey of "not run"
		cell, err := plotter.NewPolygon(plotter.XYs{{X: xy.X - 0.5, Y: xy.Y - 0.5}, {X: xy.X + 0.5, Y: xy.Y - 0.5},
			{X: xy.X + 0.5, Y: xy.Y + 0.5}, {X: xy.X - 0.5, Y: xy.Y + 0.5}})
		if err != nil {
			return nil, err
		}
		cell.Color, cell.LineStyle.Width = noValueColor, 0
		pl.Add(cell)
	}
	colourScale(pl, cols, hm.Min, hm.Max, kind)
	pl.Legend.Add("not run", swatch{notRunColor})
	if len(noValue) > 0 {
		pl.Legend.Add("no value (null)", swatch{noValueColor})
	}
	lb, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, err
	}
	for i := range lb.TextStyle {
		lb.TextStyle[i].XAlign, lb.TextStyle[i].YAlign = text.XCenter, text.YCenter
	}
	pl.Add(lb)
	pl.X.Label.Text = p.ShortKeys[colKey]
	pl.X.Tick.Marker = nominal(vals[colKey])
	pl.X.Min, pl.X.Max = -0.5, float64(nCols)-0.5
	pl.Y.Min, pl.Y.Max = -0.5, float64(nRows)-0.5
	if rowKey >= 0 {
		pl.Y.Label.Text = p.ShortKeys[rowKey]
		pl.Y.Tick.Marker = nominal(vals[rowKey])
	} else {
		pl.Y.Tick.Marker = plot.ConstantTicks{}
	}

	return chart.PNG(pl)
}

// nominal labels ticks 0, 1, … with the values' display text.
func nominal(values []string) plot.ConstantTicks {
	labels := make([]string, len(values))
	for i, v := range values {
		labels[i] = display(v)
	}
	return chart.Nominal(labels)
}

// The colours of the cells without a value.
var (
	notRunColor  = color.Gray{Y: 0xb8}
	noValueColor = color.White
)

// finishedCells counts the finished points (a report, whatever its
// metrics) of each heatmap cell.
func (s *Summary) finishedCells(colKey, rowKey, nRows, nCols int) [][]int {
	vals := axisValues(s.Schedule)
	index := func(k int, v string) int {
		for i, x := range vals[k] {
			if x == v {
				return i
			}
		}
		return -1
	}
	out := make([][]int, nRows)
	for r := range out {
		out[r] = make([]int, nCols)
	}
	for i, pt := range s.Schedule.Points {
		if s.Reports[i] == nil {
			continue
		}
		c, r := index(colKey, pt.Values[colKey]), 0
		if rowKey >= 0 {
			r = index(rowKey, pt.Values[rowKey])
		}
		out[r][c]++
	}
	return out
}

// colourScale adds to pl's legend the value range of each colour of the
// heatmap (the palette cols spread evenly over [min, max], as
// plotter.HeatMap maps them), highest first.
func colourScale(pl *plot.Plot, cols []color.Color, min, max float64, kind eval.Kind) {
	step := (max - min) / float64(len(cols))
	for i := len(cols) - 1; i >= 0; i-- {
		a, b := min+float64(i)*step, min+float64(i+1)*step
		pl.Legend.Add(eval.Format(eval.Field{Kind: kind, Value: &a})+" – "+eval.Format(eval.Field{Kind: kind, Value: &b}), swatch{cols[i]})
	}
}

// swatch is a legend thumbnail filled with one colour.
type swatch struct{ c color.Color }

// Thumbnail implements plot.Thumbnailer.
func (s swatch) Thumbnail(c *draw.Canvas) {
	r := c.Rectangle
	c.FillPolygon(s.c, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}})
	c.StrokeLines(draw.LineStyle{Color: color.Gray{Y: 0x80}, Width: vg.Points(0.5)},
		[]vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}, r.Min})
}
