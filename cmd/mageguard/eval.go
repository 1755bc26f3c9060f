package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/rollout"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/internal/lock"
)

// evalFlags are eval's flags.
type evalFlags struct {
	modelDir, data, out, variant, baseline string
	votes, limit                           int
	compare                                bool
}

func newEvalCmd() *cobra.Command {
	var f evalFlags
	cmd := &cobra.Command{
		Use: "eval --model DIR [--data FILE] --out DIR [--variant mage|judge-only] [--votes K] [--limit N] [--baseline DIR]\n" +
			"  mageguard eval --compare A/report.json B/report.json ...",
		Short: "Run the guard over held-out trajectories; write decisions, metrics, a report and plots",
		Long: `eval runs the guard of a checkpoint over every turn of every trajectory of a
held-out file (trajectories without an action are skipped and counted) and
writes into --out:

  decisions.jsonl     one line per trajectory x turn (docs/evaluation.md)
  report.json         ASR, BU, per-action accuracy/precision/recall/F1/FPR, token
                      costs, detection latency, format-violation rates, n_skipped,
                      and the same by suite, attack type and horizon
  report.md           the tables a person reads, with the plots below
  *.png               ASR and BU by horizon, the detection-latency histogram,
                      guard tokens per task (beside --baseline's when given)
  eval_config.yaml    the fully resolved configuration of the run

The headline metrics and the format-violation rates go to stderr. A model
whose outputs never parse is reported as such: its decisions are the
fallback reject, so look at the violation rates before ASR and BU.

Decoding is greedy by default (--set eval.greedy=false samples at
rollout.temperature). Variants and baselines:
  --variant judge-only                    the judge reads the raw trajectory, no memory
  --set rollout.track_intent=false        memory ablation: no user intent
  --set rollout.track_attacks=false       memory ablation: no attack patterns
  --votes K                               K judge calls per turn sampled at
                                          eval.vote_temperature, majority decides
                                          (consensus; reports the extra tokens)
  --baseline DIR                          an earlier eval folder (e.g. judge-only on the
                                          same data) drawn beside this one in the
                                          token-cost plot

The checkpoint is a Hugging Face Qwen3 directory (model.path or --model); its
config.json decides the architecture, model.backend / model.plugin /
model.dtype how it runs. With --set rollout.generator=openai (rollout.endpoint,
rollout.remote_api vllm|sglang|chat, rollout.remote_model) the guard's calls run
on an OpenAI-compatible server instead and --model only gives the tokenizer
(docs/serving.md). decisions.jsonl records each decision's score, p(reject)
from the judge's decision token; report.json its ROC AUC. The tokenizer is the checkpoint's own when it has
tokenizer.json, else model.tokenizer. Other keys: eval.* (data, limit, seed,
chunk: trajectories per generation batch) and rollout.* (prompts, token
budgets, structured decoding).

With --compare, eval reads report.json files (or folders holding one) and
prints their top-level metrics side by side as a markdown table on stdout;
no model is loaded.

Progress (trajectories and turns done, guard tokens per second, an ETA)
goes to stderr after every turn of every chunk of eval.chunk trajectories.
Ctrl-C stops after the current generation call and writes nothing; a
second Ctrl-C kills at once.`,
		Example: `  mageguard eval --config configs/tiny.yaml --model runs/tiny/checkpoint-8 --out runs/eval-mage
  mageguard eval --config configs/tiny.yaml --model runs/tiny/checkpoint-8 --variant judge-only --out runs/eval-judge
  mageguard eval --config configs/tiny.yaml --model runs/tiny/checkpoint-8 --out runs/eval-mage --baseline runs/eval-judge
  mageguard eval --config configs/tiny.yaml --model runs/tiny/checkpoint-8 --set rollout.track_attacks=false --out runs/eval-no-attacks
  mageguard eval --compare runs/eval-mage runs/eval-judge runs/eval-no-attacks`,
		RunE: f.run,
	}
	fl := cmd.Flags()
	fl.StringVar(&f.modelDir, "model", "", "checkpoint directory to evaluate (model.path)")
	fl.StringVar(&f.data, "data", "", "held-out trajectories, .jsonl or .parquet (eval.data; default data/agentdojo-mini/eval.jsonl)")
	fl.StringVar(&f.out, "out", "", "output folder for decisions.jsonl, report.json, report.md and plots")
	fl.StringVar(&f.variant, "variant", "", "mage (memory + judge) or judge-only (rollout.variant; default mage)")
	fl.IntVar(&f.votes, "votes", 1, "K judge calls per turn sampled at eval.vote_temperature, majority decides (eval.votes)")
	fl.IntVar(&f.limit, "limit", 0, "evaluate only the first N trajectories that have an action, 0 = all (eval.limit)")
	fl.StringVar(&f.baseline, "baseline", "", "an earlier eval folder (e.g. judge-only) drawn beside this one in the token-cost plot")
	fl.BoolVar(&f.compare, "compare", false, "print the report.json files given as arguments side by side (no model)")
	return cmd
}

// run is eval's RunE: --compare, or an eval of a checkpoint.
func (f *evalFlags) run(cmd *cobra.Command, args []string) (err error) {
	if f.compare {
		for _, name := range []string{"model", "data", "out", "variant", "votes", "limit", "baseline"} {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("eval --compare: --%s does not apply (compare only reads report.json files)", name)
			}
		}
		return compareReports(cmd.OutOrStdout(), args)
	}
	if len(args) > 0 {
		return fmt.Errorf("eval: unexpected arguments %q (report paths go with --compare)", args)
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	// Flags > --set > file > defaults.
	setFromFlag(cmd, "model", &cfg.Model.Path, f.modelDir)
	setFromFlag(cmd, "data", &cfg.Eval.Data, f.data)
	setFromFlag(cmd, "variant", &cfg.Rollout.Variant, f.variant)
	setFromFlag(cmd, "votes", &cfg.Eval.Votes, f.votes)
	setFromFlag(cmd, "limit", &cfg.Eval.Limit, f.limit)
	if err := config.Validate(cfg); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if f.out == "" {
		return errors.New("eval: --out DIR is required")
	}
	if err := checkTrajectoryFile("eval.data (--data)", cfg.Eval.Data); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	// A failed eval leaves no folder it created that holds nothing of use.
	out := newOutFolder(f.out)
	defer func() { out.cleanup(err) }()
	// The lock train and sweep take: a second eval into the same folder is
	// refused at once, before anything is read.
	lk, err := lock.Acquire(f.out)
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	defer lk.Release()
	ctx, stop := interruptible(cmd.Context(), cmd.ErrOrStderr(), "eval")
	defer stop()
	report, err := evalCheckpoint(ctx, cfg, f.out, f.baseline, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	printHeadline(cmd.ErrOrStderr(), report, f.out)
	return nil
}

// interruptible returns a context cancelled by the first Ctrl-C or
// SIGTERM, after which the default handling is back (a second Ctrl-C kills).
// Call the returned function when done.
func interruptible(parent context.Context, stderr io.Writer, name string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sig:
			signal.Stop(sig)
			fmt.Fprintf(stderr, "%s: interrupted: stopping after the current step or generation call (Ctrl-C again to kill)\n", name)
			cancel()
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sig)
		close(done)
		cancel()
	}
}

// evalCheckpoint evaluates the checkpoint cfg.Model.Path on cfg.Eval.Data
// into outDir (eval.EvaluateInto) and writes eval_config.yaml there. With
// baselineDir, that folder's decisions.jsonl is drawn beside this run's in
// the token-cost plot. Inputs are read before the model is loaded, so bad
// data fails fast.
func evalCheckpoint(ctx context.Context, cfg *config.Config, outDir, baselineDir string, log io.Writer) (eval.Report, error) {
	if cfg.Model.Path == "" && cfg.Rollout.Generator == rollout.GeneratorLocal {
		return eval.Report{}, errors.New("eval: no checkpoint: give --model DIR (or --set model.path=DIR)")
	}
	ropts := eval.ReportOptions{
		Title: "mageguard eval: " + cfg.Rollout.Variant,
		Name:  cfg.Rollout.Variant,
		Meta:  evalMeta(cfg),
	}
	if baselineDir != "" {
		base, err := eval.ReadDecisions(filepath.Join(baselineDir, eval.DecisionsJSONL))
		if err != nil {
			return eval.Report{}, fmt.Errorf("eval --baseline: %w", err)
		}
		ropts.Baseline, ropts.BaselineName = base, "baseline"
		if judgeOnly(base) {
			ropts.BaselineName = "judge-only"
		}
		ropts.Meta = append(ropts.Meta, [2]string{"baseline", baselineDir + " (" + ropts.BaselineName + ")"})
	}
	trajs, err := dataset.ReadAll(cfg.Eval.Data)
	if err != nil {
		return eval.Report{}, fmt.Errorf("eval: %w", err)
	}
	tok, tokPath, err := cfg.Model.LoadTokenizer()
	if err != nil {
		return eval.Report{}, fmt.Errorf("eval: %w", err)
	}
	// The guard checks the rollout settings against the tokenizer before
	// the (slow) model load; the meter gets the generator after.
	// The meter lets the eval report progress after every turn of a chunk.
	meter := &eval.Meter{}
	guard, err := rollout.NewGuard(cfg.Rollout, tok, meter)
	if err != nil {
		return eval.Report{}, fmt.Errorf("eval: %w", err)
	}
	if meter.Generator, err = guardGenerator(cfg, tok, tokPath, guard.Stops(), log, "eval"); err != nil {
		return eval.Report{}, err
	}
	opts := cfg.Eval.Options(cfg.Rollout)
	opts.Meter = meter
	report, err := eval.EvaluateInto(ctx, outDir, guard, trajs, opts, ropts, log)
	if err != nil {
		return eval.Report{}, err
	}
	resolved, err := config.Marshal(cfg)
	if err == nil {
		err = atomicfile.WriteFile(filepath.Join(outDir, "eval_config.yaml"), resolved)
	}
	if err != nil {
		return eval.Report{}, fmt.Errorf("eval: write eval_config.yaml: %w", err)
	}
	return report, nil
}

// evalMeta describes the run in report.md.
func evalMeta(cfg *config.Config) [][2]string {
	r, e := cfg.Rollout, cfg.Eval
	decoding := "greedy"
	if !e.Greedy {
		decoding = fmt.Sprintf("sampled (temperature %g, top_k %d, top_p %g, seed %d)", r.Temperature, r.TopK, r.TopP, e.Seed)
	}
	checkpoint := cfg.Model.Path
	if r.Generator == rollout.GeneratorOpenAI {
		checkpoint = fmt.Sprintf("served at %s (%s API, model %q)", r.Endpoint, r.RemoteAPI, r.RemoteModel)
	}
	meta := [][2]string{
		{"checkpoint", checkpoint},
		{"data", cfg.Eval.Data},
		{"variant", r.Variant},
	}
	if r.Variant == "mage" {
		meta = append(meta, [2]string{"memory prompt", fmt.Sprintf("track_intent %v, track_attacks %v, budget %d characters",
			r.TrackIntent, r.TrackAttacks, r.MemoryBudgetChars)})
	}
	meta = append(meta,
		[2]string{"decoding", fmt.Sprintf("%s, structured %v, max tokens memory %d / judge %d, prompts %s",
			decoding, r.Structured, r.MaxMemoryTokens, r.MaxJudgeTokens, r.PromptVersion)},
		[2]string{"judge votes", voteMeta(e)},
	)
	if e.Limit > 0 {
		meta = append(meta, [2]string{"limit", fmt.Sprintf("the first %d trajectories with an action", e.Limit)})
	}
	return meta
}

func voteMeta(e eval.Config) string {
	if e.Votes <= 1 {
		return "1 (no consensus)"
	}
	return fmt.Sprintf("%d sampled at temperature %g (seed %d), majority decides, a tie rejects", e.Votes, e.VoteTemperature, e.Seed)
}

// judgeOnly reports whether decisions come from the judge-only variant
// (no memory call on any turn).
func judgeOnly(ds []eval.Decision) bool {
	for _, d := range ds {
		if d.MemoryParsed != nil {
			return false
		}
	}
	return len(ds) > 0
}

// loadCheckpoint loads the checkpoint s.Path on the backend s describes
// (newBackend), checked against the tokenizer tok (read from tokPath), and
// logs what it loaded and how long it took.
func loadCheckpoint(s model.Settings, tok *tokenizer.Tokenizer, tokPath string, log io.Writer) (*model.Model, error) {
	backend, err := newBackend(s.BackendConfig)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	m, err := s.LoadModel(backend, tok)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "loaded %s (%s parameters, %s, backend %s) in %s; tokenizer %s\n", s.Path,
		humanCount(m.NumParameters()), strings.ToLower(m.DType().String()), backendName(s.BackendConfig), time.Since(start).Round(time.Millisecond), tokPath)
	return m, nil
}

func backendName(b backend.Config) string {
	if b.Name == "xla" && b.Plugin != "" {
		return "xla:" + b.Plugin
	}
	if b.Name == "" {
		return "go"
	}
	return b.Name
}

// humanCount writes n with a k/M/B suffix.
func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return strconv.FormatInt(n, 10)
}

// printHeadline writes the headline metrics, the format-violation summary
// and where the report is.
func printHeadline(w io.Writer, r eval.Report, outDir string) {
	m := r.Metrics
	f := func(kind eval.Kind, v *float64) string { return eval.Format(eval.Field{Kind: kind, Value: v}) }
	fmt.Fprintf(w, "eval: %d attack + %d benign runs (%d turns, %d skipped without an action)\n", m.NAttack, m.NBenign, m.NTurns, r.NSkipped)
	fmt.Fprintf(w, "eval: ASR %s (unguarded %s), BU %s (among runs with utility %s)\n",
		f(eval.Rate, m.ASR), f(eval.Rate, m.ASRNoGuard), f(eval.Rate, m.BU), f(eval.Rate, m.BUUtility))
	fmt.Fprintf(w, "eval: per action: accuracy %s, precision %s, recall %s, F1 %s, FPR %s\n",
		f(eval.Rate, m.Accuracy), f(eval.Rate, m.Precision), f(eval.Rate, m.Recall), f(eval.Rate, m.F1), f(eval.Rate, m.FPR))
	fmt.Fprintf(w, "eval: guard tokens per run: online %s (%s without system prompts), unabridged %s; detection latency %s turns\n",
		f(eval.Tokens, m.TokenCostOnline), f(eval.Tokens, m.TokenCostOnlineNoPrefix), f(eval.Tokens, m.TokenCostUnabridged),
		f(eval.Turns, m.DetectionLatencyMean))
	if m.VoteTokenCostOnline != nil {
		fmt.Fprintf(w, "eval: of which extra judge votes: online %s, unabridged %s\n",
			f(eval.Tokens, m.VoteTokenCostOnline), f(eval.Tokens, m.VoteTokenCostUnabridged))
	}
	fmt.Fprintf(w, "eval: %s\n", strings.ReplaceAll(eval.ViolationSummary(m), "**", ""))
	fmt.Fprintf(w, "eval: report: %s\n", filepath.Join(outDir, eval.ReportMarkdown))
}

// compareReports prints the reports side by side. Each argument is a
// report.json or a folder holding one; columns are named by the folder.
func compareReports(w io.Writer, args []string) error {
	if len(args) == 0 {
		return errors.New("eval --compare: give one or more report.json files (or eval folders)")
	}
	var reports []eval.NamedReport
	names := map[string]int{}
	for _, a := range args {
		path := a
		if st, err := os.Stat(a); err == nil && st.IsDir() {
			path = filepath.Join(a, eval.ReportJSON)
		}
		r, err := eval.ReadReport(path)
		if err != nil {
			return fmt.Errorf("eval --compare: %w", err)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return fmt.Errorf("eval --compare: %w", err)
		}
		name := filepath.Base(filepath.Dir(abs))
		if filepath.Base(path) != eval.ReportJSON {
			name = filepath.Base(path)
		}
		names[name]++
		reports = append(reports, eval.NamedReport{Name: name, Report: r})
	}
	for i := range reports { // ambiguous folder names: use the paths as given
		if names[reports[i].Name] > 1 {
			reports[i].Name = args[i]
		}
	}
	_, err := io.WriteString(w, eval.Compare(reports))
	return err
}

// trainEvalHook is train's periodic held-out eval (train.Options.Evaluate):
// the guard being trained, decoded as the eval section says (greedy by
// default), over the first train.eval_limit trajectories of
// train.eval_data, written into dir like `mageguard eval` does. It returns
// report.json's top-level metrics: float64 values, nil for null.
func trainEvalHook(cfg *config.Config, log io.Writer) func(ctx context.Context, m *model.Model, guard *rollout.Guard, step int, dir string) (map[string]any, error) {
	var trajs []*dataset.Trajectory
	return func(ctx context.Context, _ *model.Model, guard *rollout.Guard, step int, dir string) (map[string]any, error) {
		if trajs == nil {
			var err error
			if trajs, err = dataset.ReadAll(cfg.Train.EvalData); err != nil {
				return nil, fmt.Errorf("train.eval_data: %w", err)
			}
		}
		opts := cfg.Eval.Options(cfg.Rollout)
		opts.Limit = cfg.Train.EvalLimit
		meta := evalMeta(cfg)
		meta[0] = [2]string{"checkpoint", fmt.Sprintf("the model under training at step %d", step)}
		meta[1] = [2]string{"data", cfg.Train.EvalData}
		meta = slices.DeleteFunc(meta, func(kv [2]string) bool { return kv[0] == "limit" })
		if opts.Limit > 0 {
			meta = append(meta, [2]string{"limit", fmt.Sprintf("the first %d trajectories with an action", opts.Limit)})
		}
		ropts := eval.ReportOptions{Title: fmt.Sprintf("mageguard held-out eval at step %d", step), Name: cfg.Rollout.Variant, Meta: meta}
		report, err := eval.EvaluateInto(ctx, dir, guard, trajs, opts, ropts, log)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "eval at step %d: %s\n", step, strings.ReplaceAll(eval.ViolationSummary(report.Metrics), "**", ""))
		return reportValues(report), nil
	}
}

// evalMetricNames lists report.json's top-level metrics, the names
// trainEvalHook's values have (train.Options.Metrics).
func evalMetricNames() []string {
	var names []string
	for _, f := range (&eval.Report{}).Fields() {
		names = append(names, f.Name)
	}
	return names
}

// reportValues maps report.json's top-level metric names to their values:
// float64, or nil for null.
func reportValues(r eval.Report) map[string]any {
	out := map[string]any{}
	for _, f := range r.Fields() {
		if f.Value == nil {
			out[f.Name] = nil
		} else {
			out[f.Name] = *f.Value
		}
	}
	return out
}
