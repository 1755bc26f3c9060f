package chart

import (
	"bytes"
	"image/color"
	"image/png"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// TestPNGSizes: a plot renders at 7 × 4.5 inches, a grid at its panels'
// size times its rows and columns (96 dpi: 672 × 432 pixels; 432 × 288 a
// 4.5 × 3 inch panel).
func TestPNGSizes(t *testing.T) {
	panel := func() *plot.Plot {
		p := New("panel")
		line, points, err := LinePoints(plotter.XYs{{X: 1, Y: 2}, {X: 2, Y: 3}}, 1)
		if err != nil {
			t.Fatal(err)
		}
		p.Add(line, points)
		return p
	}
	empty := New("empty")
	NoData(empty)
	for _, tc := range []struct {
		name          string
		render        func() ([]byte, error)
		width, height int
	}{
		{"one plot", func() ([]byte, error) { return PNG(panel()) }, 672, 432},
		{"no data", func() ([]byte, error) { return PNG(empty) }, 672, 432},
		{"3 panels in rows of 2", func() ([]byte, error) {
			return GridPNG([]*plot.Plot{panel(), panel(), panel()}, 2, 4.5*vg.Inch, 3*vg.Inch)
		}, 2 * 432, 2 * 288},
		{"1 panel in a row of 2", func() ([]byte, error) {
			return GridPNG([]*plot.Plot{panel()}, 2, 4.5*vg.Inch, 3*vg.Inch)
		}, 2 * 432, 288},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := tc.render()
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if b := img.Bounds(); b.Dx() != tc.width || b.Dy() != tc.height {
				t.Errorf("%d × %d pixels, want %d × %d", b.Dx(), b.Dy(), tc.width, tc.height)
			}
		})
	}
	if empty.Title.Text != "empty (no data)" || empty.X.Max != 1 || empty.Y.Max != 1 {
		t.Errorf("an empty plot: title %q, axes to %v and %v", empty.Title.Text, empty.X.Max, empty.Y.Max)
	}
}

// TestTicks pins the tickers' labels.
func TestTicks(t *testing.T) {
	labels := func(ts []plot.Tick) []string {
		var out []string
		for _, tk := range ts {
			out = append(out, tk.Label)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		got  []plot.Tick
		want []string
	}{
		{"integers", IntegerTicks{}.Ticks(0.5, 3.5), []string{"1", "2", "3"}},
		{"integers with a label", IntegerTicks{Labels: map[float64]string{2: "two"}}.Ticks(1, 3), []string{"1", "two", "3"}},
		// 0…50: more than 20 integers, so every 4th is labelled (the step doubles from 1 to 4).
		{"every 4th of 0-50", IntegerTicks{}.Ticks(0, 50)[:5], []string{"0", "", "", "", "4"}},
		{"nominal", Nominal([]string{"a", "b"}), []string{"a", "b"}},
	} {
		if got := labels(tc.got); !slices.Equal(got, tc.want) {
			t.Errorf("%s: labels %q, want %q", tc.name, got, tc.want)
		}
	}
	for _, tk := range (PlainTicks{}).Ticks(0, 25000) {
		if strings.Contains(tk.Label, ".") {
			t.Errorf("plain tick %q has a fraction", tk.Label)
		}
	}
}

// TestWithAlpha: the channels are scaled by the opacity (premultiplied).
func TestWithAlpha(t *testing.T) {
	got := WithAlpha(color.RGBA{R: 0xff, G: 0x80, B: 0, A: 0xff}, 0x80)
	want := color.RGBA{R: 0x80, G: 0x40, B: 0, A: 0x80} // 0xff·0x80/0xff, 0x80·0x80/0xff (rounded down)
	if got != want {
		t.Errorf("%v, want %v", got, want)
	}
}

// TestAddSeries: an empty series adds nothing and returns no line; a
// series of points adds a plotter, which widens the axes to its data.
func TestAddSeries(t *testing.T) {
	p := New("t")
	if line, err := AddSeries(p, "empty", nil, 0); line != nil || err != nil {
		t.Fatalf("empty series: %v, %v", line, err)
	}
	if line, err := AddSeries(p, "two", plotter.XYs{{X: 1, Y: 2}, {X: 2, Y: 3}}, 1); line == nil || err != nil {
		t.Fatalf("two points: %v, %v", line, err)
	}
	if p.X.Min != 1 || p.X.Max != 2 || p.Y.Min != 2 || p.Y.Max != 3 { // Add widens the axes to the data
		t.Errorf("axes x [%g, %g] y [%g, %g], want [1, 2] and [2, 3]", p.X.Min, p.X.Max, p.Y.Min, p.Y.Max)
	}
}

// TestSegments: a line breaks where X jumps by more than the step (a
// horizon without data), and a lone point is a segment of its own.
func TestSegments(t *testing.T) {
	xys := plotter.XYs{{X: 0}, {X: 1}, {X: 3}, {X: 4}, {X: 5}, {X: 7}}
	var got [][]float64
	for _, seg := range Segments(xys, 1) {
		var xs []float64
		for _, p := range seg {
			xs = append(xs, p.X)
		}
		got = append(got, xs)
	}
	want := [][]float64{{0, 1}, {3, 4, 5}, {7}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Segments = %v, want %v", got, want)
	}
	if len(Segments(nil, 1)) != 0 {
		t.Error("no points gave a segment")
	}
}

// TestLegendBesideTheData: a plot with a legend is drawn narrower by the
// legend's strip, one without a legend keeps the whole width.
func TestLegendBesideTheData(t *testing.T) {
	p := New("t")
	if _, err := AddSeries(p, "a longer series name", plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 1}}, 0); err != nil {
		t.Fatal(err)
	}
	c := draw.New(vgimg.New(Width, Height))
	w := LegendWidth(p, c)
	if text := p.Legend.TextStyle.Rectangle(" a longer series name").Max.X; w < text {
		t.Errorf("legend strip %v narrower than its text %v", w, text)
	}
	if w := LegendWidth(New("empty"), c); w != 0 {
		t.Errorf("a plot without a legend gets a strip of %v", w)
	}
}
