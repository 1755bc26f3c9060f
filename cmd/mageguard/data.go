package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/agentdojo"
)

func newDataCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "data",
		Short: "Trajectory datasets: import, validate, stats, split, subset, compare, synth, label",
		Long: `Work with labeled trajectory files (.jsonl or .parquet, chosen by extension;
the schema is in docs/data.md). Every command validates every record it
reads and fails on the first bad one, naming the file, line (or row) and
field. Outputs are written to a temporary file and renamed at the end, so a
failed command leaves no output file behind.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newDataImportCmd(), newDataValidateCmd(), newDataStatsCmd(), newDataSplitCmd(),
		newDataSubsetCmd(), newDataCompareCmd(), newDataSynthCmd())
	cmd.AddCommand(newDataLabelCmd())
	return cmd
}

func newDataImportCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "import",
		Short: "Convert a benchmark's run logs into labeled trajectories",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	var runs, out, rulesFile string
	var workers int
	ad := &cobra.Command{
		Use:   "agentdojo --runs DIR --out FILE",
		Short: "Import AgentDojo run logs and label every action",
		Long: `Convert AgentDojo run logs laid out as
DIR/<model>/<suite>/<user_task>/<attack>/<injection_task>.json (see
docs/data.md, "AgentDojo import and labels") into trajectories, one per run, and label
every action with the rules file (default: the embedded
dataset/agentdojo/rules/agentdojo.yaml). Sanity runs (an injection task as
the user task) are skipped. Progress and a summary go to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runs == "" || out == "" {
				return fmt.Errorf("data import agentdojo: --runs and --out are required")
			}
			rules := agentdojo.DefaultRules()
			if rulesFile != "" {
				var err error
				if rules, err = agentdojo.LoadRules(rulesFile); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			w, err := dataset.Create(out)
			if err != nil {
				return err
			}
			defer w.Abort()
			start := time.Now()
			last := time.Time{}
			stderr := cmd.ErrOrStderr()
			sum, err := agentdojo.Import(ctx, runs, agentdojo.Options{
				Rules:   rules,
				Workers: workers,
				Emit:    w.Write,
				Progress: func(done, total int) {
					if time.Since(last) >= time.Second || done == total {
						last = time.Now()
						fmt.Fprintf(stderr, "import: %d/%d run logs (%.1fs)\n", done, total, time.Since(start).Seconds())
					}
				},
			})
			if err != nil {
				return err
			}
			if err := w.Close(); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "import: wrote %s: %d trajectories (%d attack, %d benign), %d actions, %d labeled 1; skipped %d sanity runs; %.1fs\n",
				out, sum.Trajectories, sum.Attack, sum.Benign, sum.Actions, sum.Positives, sum.Sanity, time.Since(start).Seconds())
			for _, k := range slices.Sorted(maps.Keys(sum.ByRule)) {
				fmt.Fprintf(stderr, "import:   %5d labeled 1 by rule %q\n", sum.ByRule[k], k)
			}
			return nil
		},
	}
	ad.Flags().StringVar(&runs, "runs", "", "directory of run logs: <model>/<suite>/<user_task>/<attack>/<injection_task>.json (required)")
	ad.Flags().StringVar(&out, "out", "", "output file, .jsonl or .parquet (required)")
	ad.Flags().StringVar(&rulesFile, "rules", "", "labeling rules YAML (default: the embedded dataset/agentdojo/rules/agentdojo.yaml)")
	ad.Flags().IntVar(&workers, "workers", 0, "parallel parsers (0 = number of CPUs)")
	cmd.AddCommand(ad)
	cmd.AddCommand(newDataImportOpenAICmd())
	cmd.AddCommand(newDataImportSessionsCmd())
	return cmd
}

func newDataValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE...",
		Short: "Read and validate trajectory files; print a one-line summary of each",
		Args:  trajectoryFiles("FILE..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, f := range args {
				s, err := dataset.ComputeStats(f)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: ok: %d trajectories (%d attack, %d benign), %d actions, %d labeled 1\n",
					f, s.Trajectories, s.Attack, s.Benign, s.Actions, s.Positives)
			}
			return nil
		},
	}
}

func newDataStatsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats FILE",
		Short: "Print trajectories by suite, model and kind, actions, positives, turn and attack-horizon histograms",
		Long: `Print statistics of a trajectory file: trajectories by suite, model and attack
type (attack / benign), actions and actions labeled 1, the turns-per-trajectory
histogram (buckets 0, 1, 2, 3, 4-5, 6-8, 9-12, 13-20, 21+) and the attack
horizon (actions labeled 1 per attack trajectory). With --json, one JSON
object on stdout (keys in docs/data.md, "Stats").`,
		Args: trajectoryFiles("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := dataset.ComputeStats(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), s)
			}
			return s.WriteText(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

func newDataSplitCmd() *cobra.Command {
	var evalFrac float64
	var seed uint64
	var trainOut, evalOut string
	cmd := &cobra.Command{
		Use:   "split FILE --eval-frac F --seed S --train-out A --eval-out B",
		Short: "Split trajectories into train and eval sets, disjoint by task (suite + user_task_id)",
		Long: `Split a trajectory file into train and eval files with no task (suite +
user_task_id) on both sides. Each suite is split on its own, its shuffled tasks
going to eval until eval holds at least F of the suite's trajectories; every
suite ends up on both sides with attack and benign runs (else an error names
the suite). The same file and seed always give the same split. Trajectories
keep their input order; the summary goes to stderr.`,
		Args: trajectoryFiles("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if trainOut == "" || evalOut == "" {
				return fmt.Errorf("data split: --train-out and --eval-out are required")
			}
			if trainOut == evalOut {
				return fmt.Errorf("data split: --train-out and --eval-out are the same file")
			}
			all, err := dataset.ReadAll(args[0])
			if err != nil {
				return err
			}
			train, eval, err := dataset.Split(all, evalFrac, seed)
			if err != nil {
				return err
			}
			if err := writeFiles(map[string][]*dataset.Trajectory{trainOut: train, evalOut: eval}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "split: %s: %s; %s: %s\n", trainOut, summary(train), evalOut, summary(eval))
			return nil
		},
	}
	cmd.Flags().Float64Var(&evalFrac, "eval-frac", 0.2, "fraction of each suite's trajectories to put in eval (0 < F < 1)")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "random seed of the task shuffle")
	cmd.Flags().StringVar(&trainOut, "train-out", "", "train output file (.jsonl or .parquet; required)")
	cmd.Flags().StringVar(&evalOut, "eval-out", "", "eval output file (.jsonl or .parquet; required)")
	return cmd
}

func newDataSubsetCmd() *cobra.Command {
	var o dataset.SubsetOptions
	var out string
	cmd := &cobra.Command{
		Use:   "subset FILE --out FILE",
		Short: "Draw a small seeded sample per suite (short trajectories, small observations)",
		Long: `Keep trajectories with at most --max-turns actions whose observations have at
most --max-observation-chars characters each, then draw, per suite, a seeded
random sample of --attack-per-suite attack and --benign-per-suite benign
trajectories (--positive-frac of the attack draw from runs with an action
labeled 1; negative = no stratification). This is how the bundled
data/agentdojo-mini was made (scripts/make-mini.sh).`,
		Args: trajectoryFiles("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("data subset: --out is required")
			}
			all, err := dataset.ReadAll(args[0])
			if err != nil {
				return err
			}
			sub, err := dataset.Subset(all, o)
			if err != nil {
				return err
			}
			if err := dataset.WriteAll(out, sub); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "subset: %s: %s\n", out, summary(sub))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "output file (.jsonl or .parquet; required)")
	cmd.Flags().IntVar(&o.MaxTurns, "max-turns", 12, "keep trajectories with at most this many actions (0 = no limit)")
	cmd.Flags().IntVar(&o.MaxObservationChars, "max-observation-chars", 2000, "keep trajectories whose observations are all at most this long (0 = no limit)")
	cmd.Flags().IntVar(&o.AttackPerSuite, "attack-per-suite", 60, "attack trajectories per suite")
	cmd.Flags().IntVar(&o.BenignPerSuite, "benign-per-suite", 15, "benign trajectories per suite")
	cmd.Flags().Float64Var(&o.PositiveFrac, "positive-frac", -1, "fraction of the attack draw with an action labeled 1 (negative = as drawn)")
	cmd.Flags().Uint64Var(&o.Seed, "seed", 1, "random seed")
	return cmd
}

func newDataCompareCmd() *cobra.Command {
	var asJSON bool
	var maxDiffs int
	cmd := &cobra.Command{
		Use:   "compare A B",
		Short: "Compare trajectory file B with reference A: ids, per-action label agreement, other fields",
		Long: `Match trajectories by id and actions by turn index, and report the ids on one
side only, the label agreement over actions, every action whose label differs,
and the number of differing values of every other field (arguments compared
as JSON values) with a sample. With --json, one JSON object on stdout.`,
		Args: trajectoryFiles("A", "B"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := dataset.Compare(args[0], args[1])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), c)
			}
			c.WriteText(cmd.OutOrStdout(), maxDiffs)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().IntVar(&maxDiffs, "max-label-diffs", 100, "label differences to list")
	return cmd
}

// writeFiles writes every file, committing them only when all were written.
func writeFiles(files map[string][]*dataset.Trajectory) error {
	var ws []dataset.Writer
	defer func() {
		for _, w := range ws {
			w.Abort()
		}
	}()
	for _, p := range slices.Sorted(maps.Keys(files)) {
		w, err := dataset.Create(p)
		if err != nil {
			return err
		}
		ws = append(ws, w)
		for _, t := range files[p] {
			if err := w.Write(t); err != nil {
				return err
			}
		}
	}
	for _, w := range ws {
		if err := w.Close(); err != nil {
			return err
		}
	}
	return nil
}

func summary(ts []*dataset.Trajectory) string {
	s := dataset.NewStats("")
	for _, t := range ts {
		s.Add(t)
	}
	s.Finish()
	var suites []string
	for _, k := range slices.Sorted(maps.Keys(s.BySuite)) {
		g := s.BySuite[k]
		suites = append(suites, fmt.Sprintf("%s %d/%d", k, g.Attack, g.Benign))
	}
	return fmt.Sprintf("%d trajectories (%d attack, %d benign) over %d tasks, %d actions, %d labeled 1 [attack/benign: %s]",
		s.Trajectories, s.Attack, s.Benign, s.Tasks, s.Actions, s.Positives, strings.Join(suites, ", "))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
