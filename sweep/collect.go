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

// heatmaps are the metrics drawn as heatmaps, file heatmap_<name>.png.
var heatmaps = []struct {
	name, title    string
	higherIsBetter bool
}{
	{"asr", "ASR", false},
	{"bu", "BU", true},
	{"token_cost_online", "Guard tokens per run (online)", false},
}

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
	for _, h := range heatmaps {
		png, err := s.heatmap(h.name, h.title, h.higherIsBetter)
		if err != nil {
			return nil, fmt.Errorf("sweep: heatmap of %s: %w", h.name, err)
		}
		files[HeatmapFile(h.name)] = png
	}
	for _, name := range []string{HeatmapFile("asr"), HeatmapFile("bu"), HeatmapFile("token_cost_online"), SummaryCSV, SummaryMarkdown} {
		if err := atomicfile.WriteFileMode(filepath.Join(outDir, name), files[name], 0o644); err != nil {
			return nil, fmt.Errorf("sweep: %w", err)
		}
	}
	return s, nil
}

// metricNames lists the top-level metrics of the collected reports in
// report.json's order (the vote costs only when some report has them).
func (s *Summary) metricNames() []string {
	present := map[string]bool{}
	for _, r := range s.Reports {
		if r != nil {
			for _, f := range r.Fields() {
				present[f.Name] = true
			}
		}
	}
	var all eval.Report
	all.VoteTokenCostOnline, all.VoteTokenCostUnabridged = new(float64), new(float64)
	var out []string
	for _, f := range all.Fields() {
		if present[f.Name] || !strings.HasPrefix(f.Name, "vote_") {
			out = append(out, f.Name)
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

	b.WriteString("| point")
	align := "|---:"
	for _, k := range p.ShortKeys {
		b.WriteString(" | " + k)
		align += "|---:"
	}
	for _, c := range summaryColumns {
		b.WriteString(" | " + c[1])
		align += "|---:"
	}
	b.WriteString(" |\n" + align + "|\n")
	for i, pt := range p.Points {
		fmt.Fprintf(&b, "| %d", pt.Index)
		for _, v := range pt.Values {
			b.WriteString(" | " + strings.ReplaceAll(display(v), "|", `\|`))
		}
		for _, c := range summaryColumns {
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
		at := -1
		var v float64
		for i, r := range s.Reports {
			f := field(r, bm.metric)
			if f.Value == nil {
				continue
			}
			if at < 0 || (bm.lower && *f.Value < v) || (!bm.lower && *f.Value > v) {
				at, v = i, *f.Value
			}
		}
		if at >= 0 {
			lines = append(lines, fmt.Sprintf("- %s: %s at point %d (%s)", bm.label,
				eval.Format(field(s.Reports[at], bm.metric)), at, p.Label(p.Points[at])))
		}
	}
	if len(lines) > 0 {
		b.WriteString("## Best points\n\n" + strings.Join(lines, "\n") + "\n\n")
	}

	b.WriteString("## Heatmaps\n\n")
	if len(p.Keys) > 2 {
		fmt.Fprintf(&b, "Over `%s` × `%s`; each cell is the mean over the other keys (%s).\n\n",
			p.Keys[0], p.Keys[1], "`"+strings.Join(p.Keys[2:], "`, `")+"`")
	}
	for _, h := range heatmaps {
		fmt.Fprintf(&b, "![%s](%s)\n\n", h.title, HeatmapFile(h.name))
	}
	return b.String()
}
