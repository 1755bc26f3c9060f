package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/train"
)

func newModelPretrainCmd() *cobra.Command {
	c := train.DefaultCopyConfig()
	var out, from string
	var force bool
	cmd := &cobra.Command{
		Use:   "pretrain --out DIR [--model DIR] [--task copy|lookup] [--steps 300] [--batch 32] [--length 20]",
		Short: "Teach a random model to copy: a synthetic language-modelling task, written as a checkpoint",
		Long: `pretrain trains a model on a synthetic copying task and writes it as a
checkpoint (Hugging Face layout, the tokenizer files copied in): each
sequence is --length tokens drawn uniformly from the tokenizer's ids (added
tokens left out) written twice, and only the second copy is in the loss, so
its cross-entropy (printed every 10 steps) says how well the model copies:
0 perfectly, ln(ids) not at all.

A pretrained LLM can already copy a name it has read, which is most of the
memory manager's job; a random tiny model learns it only slowly from the
guard's completions. This step gives it that ability before mageguard sft
(docs/learning.md). The model is model.path (--model) or, without one, a
random model from the model section and model.seed; the optimizer is grpo's
AdamW with grpo.learning_rate, warmup_steps, max_grad_norm and
micro_batch_size (a constant schedule after warm-up). Ctrl-C stops it
without writing anything.

--task lookup trains the judge's skill instead: two short lists of random
tokens, each after its own marker, then --length random tokens among which a
query token (from one of the lists) follows a third marker, then an ask
token; the loss is on one token, the marker of the query's list (0 nats:
always right, ln 2: a coin).`,
		Example: `  mageguard model pretrain --config configs/synth-learn.yaml --out runs/copy
  mageguard sft --config configs/synth-learn.yaml --model runs/copy --out runs/sft`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if err := checkNewOut("model pretrain", out, force); err != nil {
				return err
			}
			if cmd.Flags().Changed("model") {
				cfg.Model.Path = from
			}
			c.Seed = uint64(cfg.Model.Seed)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := cmd.ErrOrStderr()
			err = train.PretrainCopy(ctx, train.Options{Model: cfg.Model, GRPO: cfg.GRPO}, c, out, func(s train.CopyStep) {
				if s.Step%10 == 0 || s.Step == 1 || s.Step == c.Steps {
					fmt.Fprintf(log, "step %d/%d  cross-entropy %.4f  grad %.3f  %.1fs\n", s.Step, c.Steps, s.Loss, s.GradNorm, s.Seconds)
				}
			})
			if err != nil {
				return fmt.Errorf("model pretrain: %w", err)
			}
			fmt.Fprintf(log, "model pretrain: wrote %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "checkpoint directory to write")
	cmd.Flags().StringVar(&from, "model", "", "starting checkpoint directory (sets model.path; default: a random model from model.*)")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite a non-empty --out")
	cmd.Flags().StringVar(&c.Task, "task", c.Task, "copy (write a sequence again) or lookup (which list holds a query token)")
	cmd.Flags().IntVar(&c.Steps, "steps", c.Steps, "optimizer steps")
	cmd.Flags().IntVar(&c.Batch, "batch", c.Batch, "sequences a step")
	cmd.Flags().IntVar(&c.Length, "length", c.Length, "random tokens a sequence (written twice)")
	return cmd
}
