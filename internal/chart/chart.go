// Package chart is what mageguard's figures share on top of
// gonum.org/v1/plot: a titled plot, PNG rendering (one plot, or panels in a
// grid), a series drawn as a line with points, the mark of an empty plot,
// and axis ticks. eval's report plots, train's learning curves and sweep's
// heatmaps are drawn with it.
package chart

import (
	"bytes"
	"image/color"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The size of a figure PNG renders (at 96 dpi: 672 × 432 pixels).
const (
	Width  = 7 * vg.Inch
	Height = 4.5 * vg.Inch
)

// New returns an empty plot with a title, padded from the plot below it.
func New(title string) *plot.Plot {
	p := plot.New()
	p.Title.Padding = vg.Points(6)
	p.Title.Text = title
	return p
}

// PNG renders p as PNG bytes of Width × Height, its legend beside the
// axes (DrawWithLegend).
func PNG(p *plot.Plot) ([]byte, error) {
	img := vgimg.New(Width, Height)
	dc := draw.New(img)
	DrawWithLegend(p, dc, LegendWidth(p, dc))
	return pngBytes(img)
}

// GridPNG renders plots as PNG bytes: panels of w × h in rows of cols,
// filled row by row, their axes aligned, each legend beside its panel's
// axes in a strip as wide as the widest legend.
func GridPNG(plots []*plot.Plot, cols int, w, h vg.Length) ([]byte, error) {
	rows := (len(plots) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
		for j := range cols {
			if k := i*cols + j; k < len(plots) {
				grid[i][j] = plots[k]
			}
		}
	}
	img := vgimg.New(vg.Length(cols)*w, vg.Length(rows)*h)
	dc := draw.New(img)
	var strip vg.Length
	for _, p := range plots {
		strip = max(strip, LegendWidth(p, dc))
	}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter + strip, PadY: vg.Millimeter,
		PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4) + strip}
	canvases := plot.Align(grid, tiles, dc)
	for i := range grid {
		for j, p := range grid[i] {
			if p != nil {
				c := canvases[i][j]
				c.Max.X += strip // the strip right of the aligned axes
				DrawWithLegend(p, c, strip)
			}
		}
	}
	return pngBytes(img)
}

func pngBytes(img *vgimg.Canvas) ([]byte, error) {
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// legendGap separates the legend from the axes.
const legendGap = 6 * vg.Millimeter / 4

// LegendWidth is the width of the strip p's legend needs beside its axes:
// 0 without legend entries.
func LegendWidth(p *plot.Plot, c draw.Canvas) vg.Length {
	r := p.Legend.Rectangle(c)
	if w := r.Max.X - r.Min.X; w > 0 {
		return w + 2*legendGap
	}
	return 0
}

// DrawWithLegend draws p on c with its legend in a strip of width strip at
// the right, level with the top of the axes, so that no legend hides data;
// with strip 0, p as gonum draws it.
func DrawWithLegend(p *plot.Plot, c draw.Canvas, strip vg.Length) {
	if strip <= 0 {
		p.Draw(c)
		return
	}
	leg := p.Legend
	p.Legend = plot.NewLegend()
	defer func() { p.Legend = leg }()
	p.Draw(draw.Crop(c, 0, -strip, 0, 0))
	top := vg.Length(0)
	if p.Title.Text != "" {
		top = p.Title.TextStyle.Height(p.Title.Text) + p.Title.Padding
	}
	side := draw.Crop(c, c.Max.X-c.Min.X-strip+legendGap, 0, 0, -top)
	leg.Top, leg.Left, leg.XOffs, leg.YOffs = true, true, 0, 0
	leg.Draw(side)
}

// LinePoints draws xys as a line through points in the i-th series' color
// and point shape (plotutil's palettes), for p.Add and p.Legend.Add.
func LinePoints(xys plotter.XYs, i int) (*plotter.Line, *plotter.Scatter, error) {
	line, points, err := plotter.NewLinePoints(xys)
	if err != nil {
		return nil, nil, err
	}
	line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
	points.Shape = plotutil.Shape(i)
	return line, points, nil
}

// AddSeries adds xys to p as the i-th series (LinePoints) with name in
// its legend and returns its line; it adds nothing for empty xys (nil).
func AddSeries(p *plot.Plot, name string, xys plotter.XYs, i int) (*plotter.Line, error) {
	if len(xys) == 0 {
		return nil, nil
	}
	line, points, err := LinePoints(xys, i)
	if err != nil {
		return nil, err
	}
	p.Add(line, points)
	p.Legend.Add(name, line, points)
	return line, nil
}

// AddSeriesGaps is AddSeries with the line broken wherever consecutive
// points are more than maxStep apart in X: no line joins two points across
// Xs without data (every point is still drawn).
func AddSeriesGaps(p *plot.Plot, name string, xys plotter.XYs, i int, maxStep float64) (*plotter.Line, error) {
	if len(xys) == 0 {
		return nil, nil
	}
	line, points, err := LinePoints(xys, i)
	if err != nil {
		return nil, err
	}
	p.Add(points)
	for _, seg := range Segments(xys, maxStep) {
		if len(seg) < 2 {
			continue
		}
		l, err := plotter.NewLine(seg)
		if err != nil {
			return nil, err
		}
		l.LineStyle = line.LineStyle
		p.Add(l)
	}
	p.Legend.Add(name, line, points)
	return line, nil
}

// Segments splits xys (sorted by X) where consecutive points are more than
// maxStep apart in X.
func Segments(xys plotter.XYs, maxStep float64) []plotter.XYs {
	var out []plotter.XYs
	start := 0
	for k := 1; k <= len(xys); k++ {
		if k < len(xys) && xys[k].X-xys[k-1].X <= maxStep {
			continue
		}
		out = append(out, xys[start:k])
		start = k
	}
	return out
}

// NoData marks an empty plot in its title and gives it unit axes.
func NoData(p *plot.Plot) {
	p.Title.Text += " (no data)"
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = 0, 1, 0, 1
}

// WithAlpha returns c with opacity a (premultiplied, as color.RGBA is).
func WithAlpha(c color.Color, a uint8) color.Color {
	r, g, b, _ := c.RGBA()
	s := func(v uint32) uint8 { return uint8((v >> 8) * uint32(a) / 0xff) }
	return color.RGBA{s(r), s(g), s(b), a}
}

// IntegerTicks puts a tick on every integer (labelled on at most ~20 of
// them), with Labels[v] as the label of v when given.
type IntegerTicks struct{ Labels map[float64]string }

// Ticks implements plot.Ticker.
func (it IntegerTicks) Ticks(min, max float64) []plot.Tick {
	step := 1
	for (int(max)-int(min))/step > 20 {
		step *= 2
	}
	var ts []plot.Tick
	for v := int(min) - 1; v <= int(max)+1; v++ {
		if float64(v) < min || float64(v) > max {
			continue
		}
		t := plot.Tick{Value: float64(v)}
		if v%step == 0 {
			t.Label = strconv.Itoa(v)
			if l, ok := it.Labels[float64(v)]; ok {
				t.Label = l
			}
		}
		ts = append(ts, t)
	}
	return ts
}

// PlainTicks are gonum's default ticks labelled without trailing zeros
// ("25000", not "25000.00").
type PlainTicks struct{}

// Ticks implements plot.Ticker.
func (PlainTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}

// Nominal labels ticks 0, 1, … with labels, in order.
func Nominal(labels []string) plot.ConstantTicks {
	ts := make(plot.ConstantTicks, len(labels))
	for i, l := range labels {
		ts[i] = plot.Tick{Value: float64(i), Label: l}
	}
	return ts
}
