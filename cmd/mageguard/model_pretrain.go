package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/pretrain"
)

func newModelPretrainCmd() *cobra.Command {
	c := pretrain.DefaultConfig()
	var out, from string
	var force bool
	cmd := &cobra.Command{
		Use:   "pretrain --out DIR [--model DIR] [--task copy|recall] [--steps 500] [--fixed-steps 200] [--batch 32] [--length 20]",
		Short: "Teach a random model to copy: a synthetic language-modelling task, written as a checkpoint",
		Long: `pretrain trains a model on a synthetic copying task and writes it as a
checkpoint (Hugging Face layout, the tokenizer files copied in): each
sequence is random tokens drawn uniformly from the tokenizer's ids (added
tokens left out) written twice, and only the second copy is in the loss, so
its cross-entropy (printed every 10 steps) says how well the model copies:
0 perfectly, ln(ids) not at all. For the first --fixed-steps steps every
sequence has --length tokens, so the token to predict is always --length
back; after them each has 2 to --length tokens, so only the token's own
earlier occurrence tells where to look (content-based induction). A random
model learns the fixed copy first (~150 steps) and the variable one from it
(~150 more); it learned neither the variable copy nor associative recall
alone in hundreds of steps.

A pretrained LLM can already copy a name it has read and find what followed
an earlier occurrence of a name, which is most of the memory manager's and
the judge's job; a random tiny model does not learn it from the guard's
completions. This step gives it that ability before mageguard sft
(docs/learning.md). The model is model.path (--model) or, without one, a
random model from the model section and model.seed; the optimizer is grpo's
AdamW with grpo.learning_rate, warmup_steps, max_grad_norm and
micro_batch_size (a constant schedule after warm-up). Ctrl-C stops it
without writing anything.

--task recall checks that ability instead: 2 to --length pairs of a random
key and a random value, then every key again in a random order, each
followed by its value; the loss is on those values (the token after the
current token's earlier occurrence, at an offset that varies).`,
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
			cfg.Model.BackendConfig.ProcessSettings().Apply() // pretrain builds the backend (backend.ProcessSettings)
			err = pretrain.Run(ctx, cfg.Model, cfg.GRPO, c, out, func(s pretrain.Step) {
				if s.Step%10 == 0 || s.Step == 1 || s.Step == c.Steps {
					fmt.Fprintf(log, "step %d/%d  cross-entropy %.4f  grad %.3f  %.1fs\n", s.Step, c.Steps, s.Loss, s.GradNorm, s.Seconds)
				}
			})
			if err != nil {
				return fmt.Errorf("model pretrain: %w", err)
			}
			if err := writeSettings(out, cfg); err != nil {
				return err
			}
			fmt.Fprintf(log, "model pretrain: wrote %s\n", out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "checkpoint directory to write")
	cmd.Flags().StringVar(&from, "model", "", "starting checkpoint directory (sets model.path; default: a random model from model.*)")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite a non-empty --out")
	cmd.Flags().StringVar(&c.Task, "task", c.Task, "copy (write a sequence again) or recall (the value after a key seen before)")
	cmd.Flags().IntVar(&c.Steps, "steps", c.Steps, "optimizer steps")
	cmd.Flags().IntVar(&c.FixedSteps, "fixed-steps", c.FixedSteps, "copy: the first steps copy --length tokens, the later ones 2 to --length")
	cmd.Flags().IntVar(&c.Batch, "batch", c.Batch, "sequences a step")
	cmd.Flags().IntVar(&c.Length, "length", c.Length, "copy: the most random tokens a sequence (written twice); recall: the most pairs")
	return cmd
}
