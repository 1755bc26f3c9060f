package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/internal/chart"
)

// CurvesPNG is the learning-curves file that train and sft write beside
// metrics.jsonl.
const CurvesPNG = "curves.png"

// curvePanel is one panel of curves.png: series of metrics.jsonl keys
// ("eval.f1" is key f1 of a line's eval object).
type curvePanel struct {
	title  string
	series [][2]string // name, key
}

// curvePanels are the panels, in order; a panel is drawn when a line of
// metrics.jsonl has one of its keys (GRPO runs have rewards, accuracy,
// violations, memory length and KL; SFT runs cross-entropy; both held-out
// metrics on eval steps).
var curvePanels = []curvePanel{
	{"reward", [][2]string{{"judge", "reward_judge"}, {"memory", "reward_memory"}}},
	{"cross-entropy (nats per token)", [][2]string{{"memory", "loss_memory"}, {"judge", "loss_judge"}}},
	{"judge accuracy and reject rate", [][2]string{{"accuracy", "accuracy_judge"}, {"reject rate", "reject_rate"}}},
	{"format violations", [][2]string{{"memory", "memory_format_violation_rate"}, {"judge", "judge_format_violation_rate"}}},
	{"memory length (characters)", [][2]string{{"mean |m|", "memory_chars"}}},
	{"KL to the reference", [][2]string{{"k3 KL", "kl"}}},
	{"held-out (eval steps)", [][2]string{{"F1", "eval.f1"}, {"ASR", "eval.asr"}, {"BU", "eval.bu"}}},
}

// WriteCurves draws the learning curves of a metrics.jsonl file into a PNG
// (written atomically): one panel per group of metrics present, against
// the step.
func WriteCurves(metricsPath, pngPath string) error {
	data, err := os.ReadFile(metricsPath)
	if err != nil {
		return err
	}
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("%s:%d: %w", metricsPath, n, err)
		}
		lines = append(lines, l)
	}
	var plots []*plot.Plot
	for _, pn := range curvePanels {
		p, err := curvePlot(pn, lines)
		if err != nil {
			return err
		}
		if p != nil {
			plots = append(plots, p)
		}
	}
	if len(plots) == 0 {
		return fmt.Errorf("%s: no metrics to draw", metricsPath)
	}
	png, err := chart.GridPNG(plots, 2, 4.5*vg.Inch, 3*vg.Inch)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(pngPath, png)
}

// curvePlot draws one panel, or returns nil when no line has its keys.
func curvePlot(pn curvePanel, lines []map[string]any) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	p.X.Label.Text = "step"
	p.Legend.Top = true
	drawn := false
	for i, s := range pn.series {
		var xys plotter.XYs
		for _, l := range lines {
			step, ok := l["step"].(float64)
			if !ok {
				continue
			}
			if v, ok := lookup(l, s[1]); ok {
				xys = append(xys, plotter.XY{X: step, Y: v})
			}
		}
		if len(xys) == 0 {
			continue
		}
		drawn = true
		line, points, err := chart.LinePoints(xys, i)
		if err != nil {
			return nil, err
		}
		points.Radius = vg.Points(1.5)
		if len(xys) > 40 { // many steps: the line alone reads better
			p.Add(line)
			p.Legend.Add(s[0], line)
		} else {
			p.Add(line, points)
			p.Legend.Add(s[0], line, points)
		}
	}
	if !drawn {
		return nil, nil
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// lookup returns a finite number at key ("a.b" looks into object a).
func lookup(l map[string]any, key string) (float64, bool) {
	var v any = l
	for _, k := range strings.Split(key, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return 0, false
		}
		v = m[k]
	}
	f, ok := v.(float64)
	return f, ok && !math.IsNaN(f) && !math.IsInf(f, 0)
}

// writeCurves redraws Out/curves.png from Out/metrics.jsonl; a failure is
// logged, not fatal (the curves are a view of the metrics).
func (r *run) writeCurves() {
	out := r.opts.Out
	if err := WriteCurves(filepath.Join(out, "metrics.jsonl"), filepath.Join(out, CurvesPNG)); err != nil {
		fmt.Fprintf(r.log, "curves: %v\n", err)
	}
}
