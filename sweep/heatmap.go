package sweep

import (
	"image/color"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette/brewer"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"

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
	sum := make([][]float64, nRows)
	n := make([][]int, nRows)
	for r := range sum {
		sum[r], n[r] = make([]float64, nCols), make([]int, nCols)
	}
	kind = field(&eval.Report{}, metric).Kind
	for i, pt := range p.Points {
		f := field(s.Reports[i], metric)
		if f.Value == nil {
			continue
		}
		c, r := index(colKey, pt.Values[colKey]), 0
		if rowKey >= 0 {
			r = index(rowKey, pt.Values[rowKey])
		}
		sum[r][c] += *f.Value
		n[r][c]++
	}
	z = make([][]float64, nRows)
	for r := range z {
		z[r] = make([]float64, nCols)
		for c := range z[r] {
			z[r][c] = math.NaN()
			if n[r][c] > 0 {
				z[r][c] = sum[r][c] / float64(n[r][c])
			}
		}
	}
	return z, colKey, rowKey, kind
}

// heatmap draws cells(metric) as a PNG heatmap with each cell's value
// written on it; cells without a value are grey and say "not run".
// Colours run from light yellow to red, red where the metric is worst
// (higherIsBetter reverses the scale).
func (s *Summary) heatmap(metric, title string, higherIsBetter bool) ([]byte, error) {
	p := s.Schedule
	vals := axisValues(p)
	z, colKey, rowKey, kind := s.cells(metric)
	nRows, nCols := len(z), len(z[0])
	g := cellGrid{z: z}
	lo, hi := math.Inf(1), math.Inf(-1)
	var labels plotter.XYLabels
	for r := range z {
		for c, v := range z[r] {
			label := "not run"
			if !math.IsNaN(v) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
				label = eval.Format(eval.Field{Kind: kind, Value: &v})
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
	hm.NaN = color.Gray{Y: 0xd8}
	switch {
	case kind == eval.Rate:
		hm.Min, hm.Max = 0, 1 // rates on one scale across sweeps
	case lo > hi: // nothing finished
		hm.Min, hm.Max = 0, 1
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
		pl.Title.Text += " (mean over " + strings.Join(p.ShortKeys[2:], ", ") + ")"
	}
	pl.Add(hm)
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
