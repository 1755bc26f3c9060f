package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/train"
	"github.com/mageguard/mageguard/train/teacher"
)

func newSFTCmd() *cobra.Command {
	var f runFlags
	var teacherSpec string
	cmd := &cobra.Command{
		Use:   "sft --config FILE [--teacher synth|synth-myopic|synth-leaky[:P]|FILE] [--data FILE] [--model DIR] --out DIR [--resume]",
		Short: "Supervised warm start of both guard roles from a teacher",
		Long: `sft trains the guard on a teacher's outputs: cross-entropy on the completion
tokens of both roles, each memory call and each judge call its own sequence
(as in GRPO), with the guard loop's own prompts (the previous target memory
and the turn's events; the target memory and the pending action). Each step
samples train.trajectories trajectories as train does (train.balance,
train.max_turns windows, train.seed) and takes one AdamW step (grpo's
learning_rate, schedule, warm-up, clipping, micro_batch_size) on all their
turns' calls. grpo.beta, num_iterations, clip_epsilon and scale_rewards do
not apply. With sft.judge_pairs N, each step also trains on the judge calls
of N pairs of turns (the label-1 turn and a label-0 turn of an attack run):
label-1 actions are rare, so a step of a few trajectories otherwise shows the
judge about one action to reject. With sft.memory_changes N, each step also
trains on N memory calls whose target changes the memory (the few that add an
identifier; most calls copy the memory unchanged). With sft.own_memories, a
step's trajectories are trained on the memories the model writes itself: the
guard loop runs greedily first, each memory call's target is what the teacher
would write from the memory it showed, each judge call's the teacher's call on
the memory the model wrote (synth teachers only).

The teacher (sft.teacher, or --teacher):
  synth          the synthetic world's perfect memory manager and its judge rule
                 (data synth's trajectories only; memories within
                 rollout.memory_budget_chars)
  synth-myopic   a memory of the latest turn only, with the judge's rule on it:
                 it misses every attack of gap >= 2
  synth-leaky[:P]
                 a memory that keeps each earlier identifier, allowed or
                 injected alike, with probability P (default 0.5) at every
                 turn, with the judge's rule on it: it catches an attack of
                 gap g with probability P^(g-1); a warm start that can keep
                 but does not know what to keep (make learn-grid's)
  FILE           JSONL, one line per trajectory turn: {"trajectory_id", "turn",
                 "memory", "decision", "rationale"}, memory = m_t, the memory
                 after that turn's memory call; e.g. a stronger model's guard
                 outputs. Trajectories without lines are left out; one with
                 lines needs a line for every turn.

Writes to --out what train does: config.yaml, metrics.jsonl (a line per step:
cross-entropy overall and per role, grad norm, lr, tokens), curves.png,
checkpoint-STEP/ every train.save_every steps and at the end, and with
train.eval_every > 0 eval-STEP/ and checkpoint-best/ (by train.best_metric).
Ctrl-C saves a checkpoint of the last finished step; --resume continues
from the newest checkpoint with the run's own --out/config.yaml (a
change of a key that changes what the checkpoint is is refused, as by
train --resume). The checkpoint is what train --model starts GRPO from.`,
		Example: `  mageguard sft --config configs/synth-tiny.yaml --out runs/sft
  mageguard train --config configs/synth-tiny.yaml --model runs/sft/checkpoint-300 --out runs/grpo
  mageguard sft --config configs/synth-tiny.yaml --teacher synth-myopic --out runs/sft-myopic
  mageguard sft --config configs/tiny.yaml --teacher distilled.jsonl --out runs/sft-distilled`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := f.config(cmd)
			if err != nil {
				return err
			}
			setFromFlag(cmd, "teacher", &cfg.SFT.Teacher, teacherSpec)
			if err := config.Validate(cfg); err != nil {
				return err
			}
			t, err := teacher.New(cfg.SFT.Teacher, cfg.Rollout.MemoryBudgetChars)
			if err != nil {
				return err
			}
			return runLoop("sft", cfg, f.out, f.resume, func(ctx context.Context, o train.Options) (*train.Result, error) {
				return train.SFT(ctx, o, cfg.SFT, t)
			})
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&teacherSpec, "teacher", "", "synth, synth-myopic, synth-leaky[:P] or a teacher JSONL file (sets sft.teacher; default synth)")
	return cmd
}
