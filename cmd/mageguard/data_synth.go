package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/synth"
)

func newDataSynthCmd() *cobra.Command {
	o := synth.DefaultOptions()
	var out, evalOut string
	var split float64
	cmd := &cobra.Command{
		Use:   "synth --out FILE [--n N] [--seed S] [--min-gap A --max-gap B] [--split F --eval-out FILE]",
		Short: "Generate the synthetic long-horizon benchmark (payments, messages, uploads)",
		Long: `Generate trajectories of a small tool world in which the pending action alone
cannot tell a malicious action from a benign one; only earlier turns can
(docs/synth.md has the world's rules). An attack run follows an instruction
injected into the observation of turn k at turn k+g; g, the gap, is drawn
from --min-gap..--max-gap and written in attack_type ("injected-payee-gap3"),
so eval's by_attack_type is the result by gap. Ignored-injection runs
("...-ignored") carry an injection that no action follows; clean runs none.

The same flags and seed give a byte-identical file. With --split F the
trajectories are split by task (dataset split's rules): --out gets the train
side, --eval-out the eval side (at least F of each suite).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("data synth: --out is required")
			}
			if (split != 0) != (evalOut != "") {
				return fmt.Errorf("data synth: --split and --eval-out go together")
			}
			if evalOut != "" && evalOut == out {
				return fmt.Errorf("data synth: --out and --eval-out are the same file")
			}
			trs, err := synth.Generate(o)
			if err != nil {
				return err
			}
			if evalOut == "" {
				if err := dataset.WriteAll(out, trs); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "synth: %s: %s\n", out, summary(trs))
				return nil
			}
			train, eval, err := dataset.Split(trs, split, o.Seed)
			if err != nil {
				return err
			}
			if err := writeFiles(map[string][]*dataset.Trajectory{out: train, evalOut: eval}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "synth: %s: %s; %s: %s\n", out, summary(train), evalOut, summary(eval))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "output file, .jsonl or .parquet (required); with --split, the train side")
	f.IntVar(&o.N, "n", o.N, "trajectories to generate")
	f.Uint64Var(&o.Seed, "seed", o.Seed, "random seed (also of --split's task shuffle)")
	f.IntVar(&o.MinGap, "min-gap", o.MinGap, "smallest gap g: the malicious action is g turns after the injection's turn (1 = the next action)")
	f.IntVar(&o.MaxGap, "max-gap", o.MaxGap, "largest gap (at most --max-turns - 1)")
	f.IntVar(&o.MinTurns, "min-turns", o.MinTurns, "fewest actions in a run (at least 2)")
	f.IntVar(&o.MaxTurns, "max-turns", o.MaxTurns, "most actions in a run (more than --min-turns)")
	f.Float64Var(&o.AttackFrac, "attack-frac", o.AttackFrac, "share of runs that are attacks")
	f.Float64Var(&o.IgnoredFrac, "ignored-frac", o.IgnoredFrac, "share of the other runs that carry an injection the agent ignores")
	f.Float64Var(&o.DocumentFrac, "document-frac", o.DocumentFrac, "share of tasks whose items are in a document the agent reads first")
	f.Float64Var(&o.ExtraFrac, "extra-frac", o.ExtraFrac, "share of tasks with one more read (the inbox or a note file)")
	f.IntVar(&o.MaxTargets, "max-targets", o.MaxTargets, "most distinct identifiers a task names")
	f.IntVar(&o.RunsPerTask, "runs-per-task", o.RunsPerTask, "runs of each task (each its own kind, gap and injection)")
	f.StringSliceVar(&o.Suites, "suites", o.Suites, "suites to draw tasks from")
	f.Float64Var(&split, "split", 0, "split by task: put at least this share of each suite in --eval-out (0 < F < 1)")
	f.StringVar(&evalOut, "eval-out", "", "with --split: the eval side's file")
	return cmd
}
