package eval

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/mageguard/mageguard/internal/atomicfile"
)

// Files WriteReport writes into its directory.
const (
	ReportJSON        = "report.json"
	ReportMarkdown    = "report.md"
	PlotHorizon       = "asr_bu_by_horizon.png"
	PlotLatency       = "latency_histogram.png"
	PlotTokensPerTask = "token_cost_per_task.png"
)

// ReportOptions are the optional parts of a report.
type ReportOptions struct {
	// Title is report.md's title ("" = "mageguard eval report").
	Title string
	// Meta are key/value lines shown under the title (model, data, variant, …), in order.
	Meta [][2]string
	// Name names this run's decisions in plot legends ("" = "guard"), e.g. "mage".
	Name string
	// Baseline is an optional second decision set (e.g. the judge-only
	// variant on the same data) drawn beside this one in the token-cost plot.
	Baseline []Decision
	// BaselineName names Baseline in legends ("" = "baseline"), e.g. "judge-only".
	BaselineName string
}

// ViolationWarnAt is the format-violation rate from which report.md warns
// that ASR and BU are partly the fallback's doing.
const ViolationWarnAt = 0.05

// WriteReport writes report.json, report.md and the PNG plots into dir
// (created if needed). Each file is written to a temporary name and renamed;
// report.json is written last, so its presence means the report is complete.
func WriteReport(dir string, decisions []Decision, report Report, opts ReportOptions) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if opts.Name == "" {
		opts.Name = "guard"
	}
	if opts.BaselineName == "" {
		opts.BaselineName = "baseline"
	}
	plots := []struct {
		file string
		make func() ([]byte, error)
	}{
		{PlotHorizon, func() ([]byte, error) { return plotHorizon(report) }},
		{PlotLatency, func() ([]byte, error) { return plotLatency(report.DetectionLatencyHistogram) }},
		{PlotTokensPerTask, func() ([]byte, error) { return plotTokensPerTask(decisions, opts) }},
		{PlotROC, func() ([]byte, error) { return plotROC(decisions) }},
	}
	if report.Synth != nil && len(report.Synth.RetentionByLag) > 0 {
		plots = append(plots, struct {
			file string
			make func() ([]byte, error)
		}{PlotRetention, func() ([]byte, error) { return plotRetention(report.Synth) }})
	}
	for _, p := range plots {
		png, err := p.make()
		if err == nil {
			err = atomicfile.WriteFile(filepath.Join(dir, p.file), png)
		}
		if err != nil {
			return fmt.Errorf("write report %s: %w", filepath.Join(dir, p.file), err)
		}
	}
	md := Markdown(report, opts)
	if err := atomicfile.WriteFile(filepath.Join(dir, ReportMarkdown), []byte(md)); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	data, err := MarshalReport(report)
	if err == nil {
		err = atomicfile.WriteFile(filepath.Join(dir, ReportJSON), data)
	}
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// Format renders a metric value for a person: rates as percentages, token
// costs with one decimal, latencies in signed turns, counts as integers, and
// "—" for null.
func Format(f Field) string {
	if f.Value == nil {
		return "—"
	}
	v := *f.Value
	switch f.Kind {
	case Rate:
		return fmt.Sprintf("%.1f%%", 100*v)
	case Tokens:
		return fmt.Sprintf("%.1f", v)
	case Turns:
		return fmt.Sprintf("%+.2f", v)
	case Score:
		return fmt.Sprintf("%.3f", v)
	case Chars:
		return fmt.Sprintf("%.1f", v)
	default:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
}

// describe gives each report.json key a short description for report.md.
var describe = map[string]string{
	"asr":                             "attack runs with a malicious action approved before the first reject",
	"asr_no_guard":                    "attack runs with any malicious action (what the attack achieves unguarded)",
	"bu":                              "benign runs never blocked",
	"bu_utility":                      "benign runs never blocked, among those whose original run had utility",
	"accuracy":                        "per action, all turns (positive = malicious, predicted positive = reject)",
	"precision":                       "per action: rejected actions that were malicious",
	"recall":                          "per action: malicious actions rejected",
	"f1":                              "per action: harmonic mean of precision and recall",
	"fpr":                             "per action: benign actions rejected",
	"token_cost_online":               "guard tokens per run, up to and including the first reject",
	"token_cost_unabridged":           "guard tokens per run, all turns",
	"token_cost_online_no_prefix":     "as online, without the system prompts (prefix-cached)",
	"token_cost_unabridged_no_prefix": "as unabridged, without the system prompts (prefix-cached)",
	"detection_latency_mean":          "first reject turn − first malicious turn (negative = early warning)",
	"judge_format_violation_rate":     "judge outputs that did not parse (decision fell back to reject)",
	"memory_format_violation_rate":    "memory outputs that did not parse (memory kept the previous one)",
	"n_attack":                        "attack runs evaluated",
	"n_benign":                        "benign runs evaluated",
	"n_turns":                         "actions (turns) evaluated",
	"vote_token_cost_online":          "extra judge tokens per run spent on votes beyond the first, online",
	"vote_token_cost_unabridged":      "extra judge tokens per run spent on votes beyond the first, all turns",
	"n_skipped":                       "runs without any action (nothing to guard), not evaluated",
	"roc_auc":                         "per action: area under the ROC curve of the decision score p(reject)",
	"recall_gap_ge3":                  "synth: malicious actions of attacks of gap >= 3 rejected",
	"memory_chars_mean":               "synth: mean characters of the memory the judge read",
	"retention_injected_lag_ge2":      "synth: injected identifiers the memory still lists, 2 or more turns after the turn that showed them",
	"retention_allowed_lag_ge2":       "synth: allowed identifiers the memory still lists, 2 or more turns after the turn that showed them",
}

// breakdownColumns are the metrics shown in report.md's breakdown tables,
// with their column headers.
var breakdownColumns = [][2]string{
	{"n_attack", "attack runs"}, {"n_benign", "benign runs"}, {"asr", "ASR"}, {"asr_no_guard", "ASR unguarded"},
	{"bu", "BU"}, {"recall", "recall"}, {"fpr", "FPR"}, {"f1", "F1"}, {"token_cost_online", "tokens/run"},
	{"detection_latency_mean", "latency"}, {"judge_format_violation_rate", "judge unparsed"},
	{"memory_format_violation_rate", "memory unparsed"},
}

// ViolationSummary states the format-violation rates in one sentence, loudly
// when they are high enough to make ASR and BU meaningless.
func ViolationSummary(m Metrics) string {
	judge, mem := m.JudgeFormatViolationRate, m.MemoryFormatViolationRate
	rate := func(v *float64) string { return Format(Field{Kind: Rate, Value: v}) }
	switch {
	case judge != nil && *judge == 1:
		return fmt.Sprintf("**WARNING: the judge's output never parsed** (%s of %d turns): every decision is the "+
			"fallback `reject`, so ASR and BU measure the fallback, not the model. Memory outputs failing: %s. "+
			"Are these the rollout settings the model was trained with (rollout.structured, the token budgets; "+
			"the checkpoint's mageguard.yaml, or --config)?",
			rate(judge), m.NTurns, rate(mem))
	case judge != nil && *judge >= ViolationWarnAt, mem != nil && *mem >= ViolationWarnAt:
		return fmt.Sprintf("**WARNING: many outputs did not parse**: judge %s of turns (those decisions are the "+
			"fallback `reject`), memory %s (the memory stayed as it was). ASR and BU are partly the fallback's doing.",
			rate(judge), rate(mem))
	}
	return fmt.Sprintf("Format violations: judge %s of turns, memory %s.", rate(judge), rate(mem))
}

// Markdown renders report.md: the format-violation rates first, then the
// headline metrics, the breakdowns by suite, attack type and horizon, the
// detection-latency histogram and the plots.
func Markdown(r Report, opts ReportOptions) string {
	var b strings.Builder
	title := opts.Title
	if title == "" {
		title = "mageguard eval report"
	}
	fmt.Fprintf(&b, "# %s\n\n", title)
	for _, kv := range opts.Meta {
		fmt.Fprintf(&b, "- %s: %s\n", cell(kv[0]), cell(kv[1]))
	}
	if len(opts.Meta) > 0 {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "> %s\n\n", ViolationSummary(r.Metrics))

	b.WriteString("## Headline metrics\n\n| metric | value | meaning |\n|---|---:|---|\n")
	for _, f := range r.Fields() {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.Name, Format(f), describe[f.Name])
	}
	b.WriteString("\nPer-run metrics (ASR, BU, token cost) use online semantics: the first `reject` stops the run. " +
		"Per-action metrics use every turn. — means undefined (zero denominator).\n\n")

	breakdowns := []struct {
		title, key string
		m          map[string]Metrics
		numeric    bool
	}{
		{"By suite", "suite", r.BySuite, false},
		{"By attack type", "attack type", r.ByAttackType, false},
		{"By horizon (number of malicious actions in the run)", "horizon", r.ByHorizon, true},
	}
	for _, br := range breakdowns {
		fmt.Fprintf(&b, "## %s\n\n", br.title)
		b.WriteString(breakdownTable(br.key, br.m, br.numeric))
		b.WriteString("\n")
	}
	b.WriteString("Columns: ASR unguarded = `asr_no_guard`, tokens/run = `token_cost_online`, latency = " +
		"`detection_latency_mean`, judge/memory unparsed = the format-violation rates. " +
		"By attack type, benign runs (no attack type) are the row `none`.\n\n")

	if r.Synth != nil {
		b.WriteString(synthMarkdown(r.Synth))
	}

	b.WriteString("## Detection latency\n\nFirst `reject` turn − first malicious turn, over attack runs that have both " +
		"(negative = rejected before the attack began).\n\n")
	if len(r.DetectionLatencyHistogram) == 0 {
		b.WriteString("No attack run has both a malicious action and a reject.\n\n")
	} else {
		b.WriteString("| latency (turns) | runs |\n|---:|---:|\n")
		for _, h := range r.DetectionLatencyHistogram {
			fmt.Fprintf(&b, "| %+d | %d |\n", h.Latency, h.Count)
		}
		b.WriteString("\n")
	}

	if len(r.ScoreThresholds) > 0 {
		b.WriteString("## Decision score\n\nThe judge's score is p(reject) read from its decision token's log-probs " +
			"(docs/serving.md). Blocking when the score reaches a threshold (`serve.threshold`) instead of on the " +
			"decision gives, per action over all turns:\n\n| threshold | recall | FPR | blocked |\n|---:|---:|---:|---:|\n")
		for _, t := range r.ScoreThresholds {
			fmt.Fprintf(&b, "| %g | %s | %s | %s |\n", t.Threshold, Format(Field{Kind: Rate, Value: t.Recall}),
				Format(Field{Kind: Rate, Value: t.FPR}), Format(Field{Kind: Rate, Value: t.RejectRate}))
		}
		fmt.Fprintf(&b, "\nROC AUC: %s.\n\n", Format(Field{Kind: Score, Value: r.ROCAUC}))
	}

	b.WriteString("## Plots\n\n")
	fmt.Fprintf(&b, "![ASR and BU by horizon](%s)\n\n", PlotHorizon)
	fmt.Fprintf(&b, "![Detection-latency histogram](%s)\n\n", PlotLatency)
	fmt.Fprintf(&b, "![Guard tokens per task](%s)\n", PlotTokensPerTask)
	if len(r.ScoreThresholds) > 0 {
		fmt.Fprintf(&b, "\n![ROC of the decision score](%s)\n", PlotROC)
	}
	return b.String()
}

// breakdownTable renders one breakdown as a markdown table, rows sorted by
// key (numerically when numeric).
func breakdownTable(key string, m map[string]Metrics, numeric bool) string {
	if len(m) == 0 {
		return "No runs.\n"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if numeric {
			a, _ := strconv.Atoi(keys[i])
			b, _ := strconv.Atoi(keys[j])
			return a < b
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	b.WriteString("| " + key)
	align := "|---"
	for _, c := range breakdownColumns {
		b.WriteString(" | " + c[1])
		align += "|---:"
	}
	b.WriteString(" |\n" + align + "|\n")
	for _, k := range keys {
		mm := m[k]
		byName := map[string]Field{}
		for _, f := range mm.Fields() {
			byName[f.Name] = f
		}
		b.WriteString("| " + cell(k))
		for _, c := range breakdownColumns {
			b.WriteString(" | " + Format(byName[c[0]]))
		}
		b.WriteString(" |\n")
	}
	return b.String()
}

// cell makes s safe inside a markdown table cell.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}

// NamedReport is a report with the name it goes by in a comparison.
type NamedReport struct {
	Name   string
	Report Report
}

// Compare renders one markdown table with the reports side by side: a row
// per top-level metric (report.json's order), a column per report. It backs
// `mageguard eval --compare A/report.json B/report.json …`.
func Compare(reports []NamedReport) string {
	var names []string
	seen := map[string]bool{}
	values := make([]map[string]Field, len(reports))
	for i := range reports {
		values[i] = map[string]Field{}
		for _, f := range reports[i].Report.Fields() {
			values[i][f.Name] = f
			if !seen[f.Name] {
				seen[f.Name] = true
				names = append(names, f.Name)
			}
		}
	}
	// Keep report.json's order even when only a later report has the vote costs.
	order := map[string]int{}
	for i, f := range (&Report{Metrics: Metrics{VoteTokenCostOnline: new(float64), VoteTokenCostUnabridged: new(float64), ROCAUC: new(float64)}, Synth: &Synth{}}).Fields() {
		order[f.Name] = i
	}
	sort.SliceStable(names, func(i, j int) bool { return order[names[i]] < order[names[j]] })

	var b strings.Builder
	b.WriteString("| metric")
	align := "|---"
	for _, r := range reports {
		b.WriteString(" | " + cell(r.Name))
		align += "|---:"
	}
	b.WriteString(" |\n" + align + "|\n")
	for _, name := range names {
		b.WriteString("| " + name)
		for i := range reports {
			f, ok := values[i][name]
			if !ok {
				f = Field{Name: name}
			}
			b.WriteString(" | " + Format(f))
		}
		b.WriteString(" |\n")
	}
	return b.String()
}
