package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/internal/lock"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/sweep"
	"github.com/mageguard/mageguard/train"
)

// sweepFlags are sweep's flags.
type sweepFlags struct {
	out           string
	plan, collect bool
	point         int
}

func newSweepCmd() *cobra.Command {
	var f sweepFlags
	cmd := &cobra.Command{
		Use:   "sweep --config configs/sweep.yaml --out DIR [--plan | --point N | --collect]",
		Short: "Train and evaluate a grid of configurations (γ × λ, or any keys); summary table and heatmaps",
		Long: `sweep runs the grid of the config's sweep section (sweep.grid: dotted keys of
any section → lists of values; by default rewards.gamma × rewards.lambda, the
paper's sensitivity grid). Each point is sweep.base_config (a path relative
to this --config file's folder, like base:; this --config file when empty)
plus the global --set overrides plus the point's own key=value overrides.
Other paths in the configuration (train.data, sweep.eval_data, ...) are
relative to the working directory, as for every command.
For each point in order it trains (like mageguard train,
into DIR/<point>/, resuming a point that was interrupted) and evaluates the
final checkpoint on sweep.eval_data (or the point's eval.data) into the same
folder (like mageguard eval: decisions.jsonl, report.json, report.md, plots),
then marks the point DONE with a hash of its resolved configuration.
Finished points are skipped, so a killed sweep resumes where it stopped; a
finished point whose configuration has changed since (another base config,
other global --set overrides or sweep.eval_data) is an error, never reused. At the end it writes DIR/summary.csv (a row per
point: the swept keys, then report.json's top-level metrics), DIR/summary.md
and heatmaps over the first two swept keys of the metrics sweep.heatmaps
names (default ASR, BU and token cost); with more than two keys (e.g. a
seed), each cell is the mean over the others, and each metric also gets a
heatmap of its spread (sample standard deviation) and summary.md a table of
mean ± spread per cell.

Point folders are named by their values (e.g. gamma=0.25,lambda=0.5) and
numbered from 0 in the plan's order (the first key varies slowest). Every
point's configuration is checked before anything runs or is written, in
every mode.

On a cluster:
  --plan       writes DIR/plan.json and DIR/plan.sh: one command per point,
               with this binary, --config and --out as absolute paths, run
               in the current directory (plan.sh changes into it first, so it
               may be started from anywhere); sh plan.sh N runs point N (N may
               come from SLURM_ARRAY_TASK_ID or a Kubernetes indexed job's
               JOB_COMPLETION_INDEX)
  --point N    runs point N alone (skipped when already DONE)
  --collect    builds the summary from the finished point folders

Ctrl-C stops the running point (training saves a checkpoint; the point is
not marked DONE and resumes on the next run).`,
		Example: `  mageguard sweep --config configs/sweep.yaml --out runs/sweep
  mageguard sweep --config configs/sweep.yaml --out runs/sweep --plan
  sh runs/sweep/plan.sh 3
  mageguard sweep --config configs/sweep.yaml --out runs/sweep --collect`,
		Args: cobra.NoArgs,
		RunE: f.run,
	}
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "", "the sweep's output folder: a folder per point, summary.csv, summary.md, heatmaps")
	fl.BoolVar(&f.plan, "plan", false, "write plan.json and plan.sh (one command per point) and stop")
	fl.IntVar(&f.point, "point", 0, "run point N of the plan alone")
	fl.BoolVar(&f.collect, "collect", false, "write the summary from the finished point folders and stop")
	return cmd
}

// run is sweep's RunE: the schedule of the config's grid, every point's
// configuration resolved and checked, then the mode the flags ask for.
func (f *sweepFlags) run(cmd *cobra.Command, _ []string) error {
	modes := 0
	for _, name := range []string{"plan", "point", "collect"} {
		if cmd.Flags().Changed(name) {
			modes++
		}
	}
	if modes > 1 {
		return errors.New("sweep: --plan, --point and --collect are exclusive")
	}
	if f.out == "" {
		return errors.New("sweep: --out DIR is required")
	}
	p, err := sweepSchedule()
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	if f.plan || f.collect { // they write into --out: not while a sweep runs there
		lk, err := lock.Acquire(f.out)
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		defer lk.Release()
	}
	switch {
	case f.plan:
		return writeSweepSchedule(p, f.out, stderr)
	case f.collect:
		return collectSweep(p, f.out, stderr)
	}
	ctx, stop := interruptible(cmd.Context(), stderr, "sweep")
	defer stop()
	opts := sweep.Options{Runner: sweepRunner(p, stderr), Progress: stderr}
	if cmd.Flags().Changed("point") {
		return sweep.RunPoint(ctx, p, f.out, f.point, opts)
	}
	return sweep.Run(ctx, p, f.out, opts)
}

// sweepSchedule lays out the configuration's sweep and resolves and checks
// every point's configuration before anything runs or is written; its hash
// tells a finished point's DONE whether it ran with this configuration.
func sweepSchedule() (*sweep.Schedule, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, err
	}
	sc := cfg.Sweep
	sc.BaseConfig = sweep.ResolveBaseConfig(sc.BaseConfig, global.configFile)
	p, err := sweep.NewSchedule(sc)
	if err != nil {
		return nil, err
	}
	for i, pt := range p.Points {
		pcfg, err := pointConfig(p, pt)
		if err != nil {
			return nil, err
		}
		if p.Points[i].ConfigHash, err = pointHash(pcfg); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// writeSweepSchedule writes --plan's plan.json and plan.sh into out.
func writeSweepSchedule(p *sweep.Schedule, out string, log io.Writer) error {
	wd, command, err := sweepCommand(out)
	if err != nil {
		return err
	}
	if err := sweep.WriteSchedule(out, p, wd, command); err != nil {
		return err
	}
	fmt.Fprintf(log, "sweep: %d points; wrote %s and %s\n", len(p.Points),
		filepath.Join(out, sweep.PlanJSON), filepath.Join(out, sweep.PlanShell))
	return nil
}

// collectSweep writes the summary of the finished points in out (--collect).
func collectSweep(p *sweep.Schedule, out string, log io.Writer) error {
	sum, err := sweep.Collect(out, p)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "sweep: collected %d of %d points into %s, %s and heatmaps\n",
		len(p.Points)-len(sum.Missing()), len(p.Points), filepath.Join(out, sweep.SummaryCSV), filepath.Join(out, sweep.SummaryMarkdown))
	if missing := sum.Missing(); len(missing) > 0 {
		fmt.Fprintf(log, "sweep: not finished: points %v\n", missing)
	}
	return nil
}

// sweepCommand returns the working directory and the command line that
// reruns this sweep there (for plan.sh): this binary, --config, the global
// --set overrides, --out; the binary and the paths are absolute.
func sweepCommand(out string) (string, []string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", nil, fmt.Errorf("sweep --plan: %w", err)
	}
	bin, err := os.Executable()
	if err != nil {
		return "", nil, fmt.Errorf("sweep --plan: the path of this binary: %w", err)
	}
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(wd, p)
	}
	c := []string{bin, "sweep"}
	if global.configFile != "" {
		c = append(c, "--config", abs(global.configFile))
	}
	for _, kv := range global.sets {
		c = append(c, "--set", kv)
	}
	return wd, append(c, "--out", abs(out)), nil
}

// pointHash is the hash of a point's resolved configuration that its DONE
// records: the YAML of every section but sweep (extending the grid or
// renaming the base config file does not change a point).
func pointHash(cfg *config.Config) (string, error) {
	c := *cfg
	c.Sweep = sweep.Config{}
	data, err := config.Marshal(&c)
	if err != nil {
		return "", fmt.Errorf("sweep: %w", err)
	}
	return sweep.ConfigHash(data), nil
}

// pointConfig resolves point pt's configuration: the plan's base config
// (or the sweep's own file), the global --set overrides, then the point's.
func pointConfig(p *sweep.Schedule, pt sweep.Point) (*config.Config, error) {
	base := p.BaseConfig
	if base == "" {
		base = global.configFile
	}
	sets := append(append([]string{}, global.sets...), pt.Sets...)
	cfg, err := config.Load(base, sets)
	if err != nil {
		return nil, fmt.Errorf("sweep: point %d (%s): %w", pt.Index, pt.Name, err)
	}
	if p.EvalData != "" {
		cfg.Eval.Data = p.EvalData
	}
	return cfg, nil
}

// sweepRunner trains a point into its folder (resuming an interrupted
// run), then evaluates its final checkpoint there.
func sweepRunner(p *sweep.Schedule, log io.Writer) sweep.Runner {
	return func(ctx context.Context, pt sweep.Point, dir string) error {
		cfg, err := pointConfig(p, pt)
		if err != nil {
			return err
		}
		resolved, err := config.Marshal(cfg)
		if err != nil {
			return err
		}
		var evaluate func(ctx context.Context, m *model.Model, guard *rollout.Guard, step int, dir string) (map[string]any, error)
		if cfg.Train.EvalEvery > 0 {
			evaluate = trainEvalHook(cfg, log)
		}
		cfg.Model.BackendConfig.ProcessSettings().Apply() // the point's, as `mageguard train` applies them (backend.ProcessSettings)
		res, err := train.Run(ctx, train.Options{
			Model: cfg.Model, Rollout: cfg.Rollout, Rewards: cfg.Rewards, GRPO: cfg.GRPO, Train: cfg.Train,
			Out: dir, Resume: true, ResolvedConfig: resolved, Progress: log, Evaluate: evaluate, Metrics: evalMetricNames(),
		})
		if err != nil {
			return fmt.Errorf("train: %w", err)
		}
		if res.Stopped {
			if err := ctx.Err(); err != nil {
				return err
			}
			return errors.New("training stopped early")
		}
		cfg.Model.Path = res.Checkpoint
		report, err := evalCheckpoint(ctx, cfg, dir, "", log)
		if err != nil {
			return err
		}
		printHeadline(log, report, dir)
		return nil
	}
}
