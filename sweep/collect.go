package sweep

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mageguard/mageguard/eval"

	"github.com/mageguard/mageguard/internal/atomicfile"
)

// Files Collect writes into the sweep's output folder.
const (
	SummaryCSV      = "summary.csv"
	SummaryMarkdown = "summary.md"
)

// looks are the titles of the metrics drawn as heatmaps, and whether higher
// is better (the colour scale); a metric not listed is titled by its key.
var looks = map[string]struct {
	title          string
	higherIsBetter bool
}{
	"asr":                        {"ASR", false},
	"bu":                         {"BU", true},
	"token_cost_online":          {"Guard tokens per run (online)", false},
	"f1":                         {"F1", true},
	"fpr":                        {"FPR", false},
	"recall":                     {"Recall", true},
	"precision":                  {"Precision", true},
	"accuracy":                   {"Accuracy", true},
	"recall_gap_ge3":             {"Recall at gap ≥ 3", true},
	"memory_chars_mean":          {"Memory characters", false},
	"retention_injected_lag_ge2": {"Injected ids kept at lag ≥ 2", true},
	"retention_allowed_lag_ge2":  {"Allowed ids kept at lag ≥ 2", false},
}

// defaultHeatmaps are drawn when the schedule names none.
var defaultHeatmaps = []string{"asr", "bu", "token_cost_online"}

// heatmapMetrics are the metrics the schedule draws as heatmaps.
func heatmapMetrics(p *Schedule) []string {
	if len(p.Heatmaps) == 0 {
		return defaultHeatmaps
	}
	return p.Heatmaps
}

// title is a metric's heatmap title and column header.
func title(metric string) (string, bool) {
	if l, ok := looks[metric]; ok {
		return l.title, l.higherIsBetter
	}
	return metric, false
}

// fullReport has every optional part, so its Fields name every metric a
// report.json can have, in order.
func fullReport() *eval.Report {
	return &eval.Report{Metrics: eval.Metrics{VoteTokenCostOnline: new(float64), VoteTokenCostUnabridged: new(float64),
		ROCAUC: new(float64)}, Synth: &eval.Synth{}}
}

// metricKinds maps every top-level metric of a report.json to its kind.
func metricKinds() map[string]eval.Kind {
	out := map[string]eval.Kind{}
	for _, f := range fullReport().Fields() {
		out[f.Name] = f.Kind
	}
	return out
}

// metricOrder lists every top-level metric of a report.json, in order.
func metricOrder() []string {
	var out []string
	for _, f := range fullReport().Fields() {
		out = append(out, f.Name)
	}
	return out
}

// metricKind is metric's kind (Rate for an unknown name).
func metricKind(metric string) eval.Kind { return metricKinds()[metric] }

// SpreadFile is the file name of the heatmap of a metric's spread over
// the swept keys after the first two.
func SpreadFile(metric string) string { return "heatmap_" + metric + "_sd.png" }

// HeatmapFile is the file name of the heatmap of a report.json metric.
func HeatmapFile(metric string) string { return "heatmap_" + metric + ".png" }

// Summary is what Collect found: a report per point.
type Summary struct {
	Schedule *Schedule
	// Reports holds each point's report.json by point index; nil for a point not finished.
	Reports []*eval.Report
}

// Missing lists the indices of the points not finished.
func (s *Summary) Missing() []int {
	var out []int
	for i, r := range s.Reports {
		if r == nil {
			out = append(out, i)
		}
	}
	return out
}

// Collect reads report.json of every finished point (DONE present) under
// outDir and writes summary.csv (a row per point: point, dir, the swept
// keys, then report.json's top-level metrics; empty cells for a point not
// finished or a null metric), summary.md and the heatmaps of ASR, BU and
// token cost. It backs `mageguard sweep --collect`.
func Collect(outDir string, sched *Schedule) (*Summary, error) {
	s := &Summary{Schedule: sched, Reports: make([]*eval.Report, len(sched.Points))}
	for i, pt := range sched.Points {
		dir := filepath.Join(outDir, pt.Name)
		ok, err := finished(outDir, pt)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		r, err := eval.ReadReport(filepath.Join(dir, eval.ReportJSON))
		if err != nil {
			return nil, fmt.Errorf("sweep: point %d (%s) is marked done but: %w", pt.Index, pt.Name, err)
		}
		s.Reports[i] = &r
	}
	csvData, err := s.CSV()
	if err != nil {
		return nil, fmt.Errorf("sweep: %s: %w", SummaryCSV, err)
	}
	files := map[string][]byte{
		SummaryCSV:      csvData,
		SummaryMarkdown: []byte(s.Markdown()),
	}
	var names []string
	for _, m := range heatmapMetrics(sched) {
		t, better := title(m)
		png, err := s.draw(m, t, better, false)
		if err != nil {
			return nil, fmt.Errorf("sweep: heatmap of %s: %w", m, err)
		}
		files[HeatmapFile(m)] = png
		names = append(names, HeatmapFile(m))
		if len(sched.Keys) > 2 {
			if png, err = s.draw(m, t, better, true); err != nil {
				return nil, fmt.Errorf("sweep: heatmap of the spread of %s: %w", m, err)
			}
			files[SpreadFile(m)] = png
			names = append(names, SpreadFile(m))
		}
	}
	for _, name := range append(names, SummaryCSV, SummaryMarkdown) {
		if err := atomicfile.WriteFileMode(filepath.Join(outDir, name), files[name], 0o644); err != nil {
			return nil, fmt.Errorf("sweep: %w", err)
		}
	}
	return s, nil
}

// metricNames lists the top-level metrics of the collected reports in
// report.json's order (the optional ones — vote costs, ROC AUC, the synth
// figures — only when some report has them).
func (s *Summary) metricNames() []string {
	present := map[string]bool{}
	for _, r := range s.Reports {
		if r != nil {
			for _, f := range r.Fields() {
				present[f.Name] = true
			}
		}
	}
	optional := map[string]bool{}
	for _, f := range fullReport().Fields() {
		optional[f.Name] = true
	}
	var plain eval.Report
	for _, f := range plain.Fields() {
		optional[f.Name] = false
	}
	var out []string
	for _, name := range metricOrder() {
		if present[name] || !optional[name] {
			out = append(out, name)
		}
	}
	return out
}

// field returns the named metric of r (Value nil when absent).
func field(r *eval.Report, name string) eval.Field {
	if r != nil {
		for _, f := range r.Fields() {
			if f.Name == name {
				return f
			}
		}
	}
	return eval.Field{Name: name}
}

// CSV renders summary.csv.
func (s *Summary) CSV() ([]byte, error) {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	names := s.metricNames()
	header := append(append([]string{"point", "dir"}, s.Schedule.Keys...), names...)
	if err := w.Write(header); err != nil {
		return nil, err
	}
	for i, pt := range s.Schedule.Points {
		row := []string{strconv.Itoa(pt.Index), pt.Name}
		for _, v := range pt.Values {
			row = append(row, display(v))
		}
		for _, n := range names {
			cell := ""
			if f := field(s.Reports[i], n); f.Value != nil {
				cell = strconv.FormatFloat(*f.Value, 'g', -1, 64)
			}
			row = append(row, cell)
		}
		if err := w.Write(row); err != nil {
			return nil, err
		}
	}
	w.Flush()
	return buf.Bytes(), w.Error()
}

// summaryColumns are the metrics of summary.md's table, with their headers.
var summaryColumns = [][2]string{
	{"asr", "ASR"}, {"bu", "BU"}, {"f1", "F1"}, {"fpr", "FPR"},
	{"token_cost_online", "tokens/run online"}, {"token_cost_unabridged", "tokens/run all"},
	{"detection_latency_mean", "latency"}, {"judge_format_violation_rate", "judge unparsed"},
	{"memory_format_violation_rate", "memory unparsed"},
}

// Markdown renders summary.md.
func (s *Summary) Markdown() string {
	p := s.Schedule
	var b strings.Builder
	b.WriteString("# mageguard sweep summary\n\n")
	missing := s.Missing()
	fmt.Fprintf(&b, "%d points over %s (the first key varies slowest); %d finished",
		len(p.Points), "`"+strings.Join(p.Keys, "` × `")+"`", len(p.Points)-len(missing))
	if len(missing) > 0 {
		var names []string
		for _, i := range missing {
			names = append(names, fmt.Sprintf("%d (`%s`)", i, p.Points[i].Name))
		}
		fmt.Fprintf(&b, ", **%d not finished**: %s", len(missing), strings.Join(names, ", "))
	}
	b.WriteString(".\n\n")
	if p.BaseConfig != "" || p.EvalData != "" {
		fmt.Fprintf(&b, "Base config: `%s`; eval data: `%s`.\n\n", p.BaseConfig, p.EvalData)
	}

	var bad []string
	for i, r := range s.Reports {
		if r == nil {
			continue
		}
		j, m := r.JudgeFormatViolationRate, r.MemoryFormatViolationRate
		if (j != nil && *j >= eval.ViolationWarnAt) || (m != nil && *m >= eval.ViolationWarnAt) {
			bad = append(bad, fmt.Sprintf("%d (judge %s, memory %s)", i,
				eval.Format(eval.Field{Kind: eval.Rate, Value: j}), eval.Format(eval.Field{Kind: eval.Rate, Value: m})))
		}
	}
	if len(bad) > 0 {
		fmt.Fprintf(&b, "> **WARNING: format violations** at points %s: their decisions are partly the "+
			"fallback `reject`, so their ASR and BU say little about the model.\n\n", strings.Join(bad, "; "))
	}

	columns := s.columns()
	b.WriteString("| point")
	align := "|---:"
	for _, k := range p.ShortKeys {
		b.WriteString(" | " + k)
		align += "|---:"
	}
	for _, c := range columns {
		b.WriteString(" | " + c[1])
		align += "|---:"
	}
	b.WriteString(" |\n" + align + "|\n")
	for i, pt := range p.Points {
		fmt.Fprintf(&b, "| %d", pt.Index)
		for _, v := range pt.Values {
			b.WriteString(" | " + strings.ReplaceAll(display(v), "|", `\|`))
		}
		for _, c := range columns {
			if s.Reports[i] == nil {
				b.WriteString(" | ")
				continue
			}
			b.WriteString(" | " + eval.Format(field(s.Reports[i], c[0])))
		}
		b.WriteString(" |\n")
	}
	b.WriteString("\nEmpty rows are points not finished; — is a metric with a zero denominator. " +
		"Every point's full report is `<point folder>/report.md`; all metrics are in `summary.csv`.\n\n")

	b.WriteString(s.bestPoints())
	b.WriteString("## Heatmaps\n\n")
	if len(p.Keys) > 2 {
		fmt.Fprintf(&b, "Over `%s` × `%s`; each cell is the mean over the other keys (%s), and its spread "+
			"the sample standard deviation over them.\n\n",
			p.Keys[0], p.Keys[1], "`"+strings.Join(p.Keys[2:], "`, `")+"`")
		b.WriteString(s.cellTable())
	}
	for _, m := range heatmapMetrics(p) {
		t, _ := title(m)
		fmt.Fprintf(&b, "![%s](%s)\n\n", t, HeatmapFile(m))
		if len(p.Keys) > 2 {
			fmt.Fprintf(&b, "![%s, spread](%s)\n\n", t, SpreadFile(m))
		}
	}
	return b.String()
}

// bestPoints is summary.md's "Best points" section: the point with the
// lowest ASR, the highest BU, the highest F1 and the fewest guard tokens
// ("" when no point has a report). Points whose values read the same as
// the best (ties at the precision shown) are all named, and none is called
// the best: "every point ties" when all of them do.
func (s *Summary) bestPoints() string {
	best := []struct {
		metric, label string
		lower         bool
	}{
		{"asr", "lowest ASR", true},
		{"bu", "highest BU", false},
		{"f1", "highest F1", false},
		{"token_cost_online", "fewest guard tokens per run (online)", true},
	}
	var lines []string
	for _, bm := range best {
		at, withValue := -1, 0
		var v float64
		for i, r := range s.Reports {
			f := field(r, bm.metric)
			if f.Value == nil {
				continue
			}
			withValue++
			if at < 0 || (bm.lower && *f.Value < v) || (!bm.lower && *f.Value > v) {
				at, v = i, *f.Value
			}
		}
		if at < 0 {
			continue
		}
		shown := eval.Format(field(s.Reports[at], bm.metric))
		var tied []string
		for i, r := range s.Reports {
			if f := field(r, bm.metric); f.Value != nil && eval.Format(f) == shown {
				tied = append(tied, strconv.Itoa(i))
			}
		}
		switch {
		case len(tied) == 1:
			lines = append(lines, fmt.Sprintf("- %s: %s at point %d (%s)", bm.label, shown, at, s.Schedule.Label(s.Schedule.Points[at])))
		case len(tied) == withValue:
			lines = append(lines, fmt.Sprintf("- %s: none; every point with a value (%d) ties at %s", bm.label, withValue, shown))
		default:
			lines = append(lines, fmt.Sprintf("- %s: none; %d points tie at %s (points %s)", bm.label, len(tied), shown, strings.Join(tied, ", ")))
		}
	}
	if len(lines) == 0 {
		return ""
	}
	return "## Best points\n\n" + strings.Join(lines, "\n") + "\n\n"
}

// columns are summary.md's point-table columns: summaryColumns, then the
// heatmap metrics not among them.
func (s *Summary) columns() [][2]string {
	out := append([][2]string{}, summaryColumns...)
	have := map[string]bool{}
	for _, c := range out {
		have[c[0]] = true
	}
	for _, m := range heatmapMetrics(s.Schedule) {
		if !have[m] {
			t, _ := title(m)
			out = append(out, [2]string{m, t})
		}
	}
	return out
}

// cellTable renders the heatmap metrics per cell of the first two keys:
// mean ± spread over the cell's points, and how many points had a value.
func (s *Summary) cellTable() string {
	p := s.Schedule
	vals := axisValues(p)
	ms := heatmapMetrics(p)
	type stats struct {
		mean, sd [][]float64
		n        [][]int
		kind     eval.Kind
	}
	st := make([]stats, len(ms))
	for i, m := range ms {
		st[i].mean, st[i].sd, st[i].n, _, _, st[i].kind = s.cellStats(m)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| %s | %s |", p.ShortKeys[0], p.ShortKeys[1])
	for _, m := range ms {
		t, _ := title(m)
		b.WriteString(" " + t + " |")
	}
	b.WriteString("\n|---:|---:|" + strings.Repeat("---:|", len(ms)) + "\n")
	for r, rv := range vals[0] {
		for c, cv := range vals[1] {
			fmt.Fprintf(&b, "| %s | %s |", display(rv), display(cv))
			for _, x := range st {
				b.WriteString(" " + meanSpread(x.mean[r][c], x.sd[r][c], x.n[r][c], x.kind) + " |")
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\nEach cell: mean ± spread (points with a value).\n\n")
	return b.String()
}

// meanSpread writes "mean ± sd (n)", "mean (1)" or "—".
func meanSpread(mean, sd float64, n int, kind eval.Kind) string {
	f := func(v float64) string { return eval.Format(eval.Field{Kind: kind, Value: &v}) }
	switch {
	case n == 0:
		return "—"
	case n == 1:
		return f(mean) + " (1)"
	}
	return fmt.Sprintf("%s ± %s (%d)", f(mean), f(sd), n)
}
