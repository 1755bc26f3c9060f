package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/train"
)

// trainConfig resolves train's configuration. A resumed run starts from
// the configuration it was started with (--out/config.yaml), so that its
// data, model and reference stay the same; --set and flags still apply.
func trainConfig(out string, resume bool) (*config.Config, error) {
	saved := filepath.Join(out, "config.yaml")
	if _, err := os.Stat(saved); !resume || err != nil {
		return loadConfig()
	}
	if global.configFile != "" {
		return nil, fmt.Errorf("--resume continues with the run's own %s: drop --config (change keys with --set)", saved)
	}
	fmt.Fprintf(os.Stderr, "resume: configuration from %s\n", saved)
	return config.LoadRun(saved, global.sets)
}

func newTrainCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "train --config FILE [--data FILE] [--model DIR] --out DIR [--resume]",
		Short: "Train a MAGE guard with turn-wise GRPO on labeled trajectories",
		Long: `train runs turn-wise GRPO (docs/design.md): each step samples train.trajectories
trajectories (balanced between attack runs with a label-1 action and the rest
when train.balance), runs rollout.group_size shadow-memory chains of the guard
over each (memory call, then judge call, every turn), scores every turn with
the judge and discounted memory rewards, and updates the model.

At start it prints mageguard plan's one-line summary of the configuration's
memory, and refuses a configuration that cannot fit the device when the
device's memory is known (go: the machine's; xla with a CUDA plugin: GPU 0's,
from nvidia-smi).

Without model.path (--model) training starts from a random Qwen3 built from the
model.* architecture keys and model.seed (what configs/tiny.yaml does).

Writes to --out: config.yaml (the resolved config), metrics.jsonl (a line per
step), curves.png (the learning curves of metrics.jsonl), rollouts.jsonl (with train.log_rollouts),
tokens.jsonl (every trained token's log-probs and loss term, with train.log_tokens), checkpoint-STEP/ (Hugging Face
model directories with optimizer.safetensors and trainer_state.json) every
train.save_every steps and at the end, keeping the newest train.keep_last, and
checkpoint-best/ by train.best_metric when train.eval_every > 0.
Ctrl-C saves a checkpoint of the last finished step and exits; --resume
continues from the newest checkpoint in --out with the run's own
--out/config.yaml (plus any --set and flags given now, e.g. --set
train.steps=200 to train longer; --config is refused with --resume). A
change of a key that changes what the checkpoint is (a model.* key other
than how it runs, train.checkpoint_dtype, grpo.master_dtype) is refused,
naming the key; other changes are logged and recorded as config_changed in
the resumed run's first metrics.jsonl line.

grpo.loss picks the objective (grpo, dapo, gspo, cispo) and
grpo.rollout_correction (tis, mis) weighs it for a sampler whose log-probs are
not π_old's (docs/training.md). With a LoRA adapter (model.lora.rank) and
rollout.generator: openai, a vLLM or SGLang server generates the rollouts and
loads the adapter after every step (docs/real-use.md); otherwise training
needs the local model.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := f.config(cmd)
			if err != nil {
				return err
			}
			if err := config.Validate(cfg); err != nil {
				return err
			}
			// What the configuration needs on the device, before anything is
			// allocated: refused when it cannot fit a device whose memory is known.
			p, err := planOf(cfg, 0)
			if err != nil {
				return err
			}
			fmt.Fprintln(os.Stderr, p.Summary())
			if fits, known := p.Fits(); known && !fits {
				var b strings.Builder
				if err := p.WriteText(&b); err != nil {
					return err
				}
				return fmt.Errorf("train: the configuration does not fit the device (mageguard plan):\n%s", b.String())
			}
			return runLoop("train", cfg, f.out, f.resume, train.Run)
		},
	}
	f.add(cmd)
	return cmd
}

// runLoop runs a training loop of train (train.Run, or SFT with its teacher)
// on cfg into out: a first Ctrl-C or SIGTERM stops it after a checkpoint of
// the last finished step, a second kills at once; then it says where the
// run wrote and how to resume it (`mageguard NAME --resume`).
func runLoop(name string, cfg *config.Config, out string, resume bool, loop func(context.Context, train.Options) (*train.Result, error)) (err error) {
	// A run that fails before its first checkpoint leaves no folder behind;
	// one with a checkpoint keeps it for --resume.
	outDir := newOutFolder(out)
	defer func() { outDir.cleanup(err, "checkpoint-*") }()
	resolved, err := config.Marshal(cfg)
	if err != nil {
		return err
	}
	cfg.Model.BackendConfig.ProcessSettings().Apply() // train builds the backend (backend.ProcessSettings)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { // a second Ctrl-C kills at once
		<-ctx.Done()
		stop()
	}()
	res, err := loop(ctx, train.Options{
		Model: cfg.Model, Rollout: cfg.Rollout, Rewards: cfg.Rewards, GRPO: cfg.GRPO, Train: cfg.Train,
		Out: out, Resume: resume, ResolvedConfig: resolved, Progress: os.Stderr,
		Evaluate: trainEvalHook(cfg, os.Stderr), Metrics: evalMetricNames(),
	})
	if err != nil {
		return err
	}
	if res.Stopped {
		fmt.Fprintf(os.Stderr, "stopped after step %d; resume with: %s %s --resume --out %s\n", res.Steps, os.Args[0], name, out)
	}
	fmt.Fprintf(os.Stderr, "checkpoint: %s\nmetrics:    %s\ncurves:     %s\n", res.Checkpoint,
		filepath.Join(out, "metrics.jsonl"), filepath.Join(out, train.CurvesPNG))
	return nil
}
