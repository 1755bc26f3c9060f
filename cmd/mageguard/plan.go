package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/plan"
	"github.com/mageguard/mageguard/rollout"
)

func newPlanCmd() *cobra.Command {
	var (
		modelDir, deviceMemory string
		asJSON                 bool
	)
	cmd := &cobra.Command{
		Use:   "plan --config FILE [--model DIR] [--device-memory SIZE] [--json]",
		Short: "What a configuration needs in device memory, before anything is allocated",
		Long: `plan states what training with a configuration needs on one device: the
resident state (weights in model.dtype, float32 master weights, gradient
accumulators and AdamW moments, the frozen reference when grpo.beta > 0), and
on top of it the peak of each phase of a step (a micro-batch's backward with
its activations and the LM head's working set, the gradients, the optimizer
update, a generation batch's prefill and decoding with its KV cache), the
total, whether it fits, and the largest grpo.micro_batch_size and
rollout.batch_size that fit. Nothing is allocated and no weights are read.

The architecture comes from --model's config.json when given (or model.path),
else from the model.* architecture keys. The sequences are the longest guard
calls the configuration allows (system prompts measured with the tokenizer).
The device's memory is --device-memory (e.g. 141GB, 80GiB), else what the
backend's device reports (go: the machine's memory; xla with a CUDA plugin:
nvidia-smi), times the share the backend may use (model.xla_memory_fraction,
0.75 by default on CUDA). A size needs its unit. plan exits with status 1
when the configuration does not fit the device, 0 when it fits or the
device's memory is unknown. docs/real-use.md explains the formulas.

  mageguard plan --config configs/default.yaml --device-memory 141GB
  mageguard plan --config configs/default.yaml --device-memory 80GB --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			setFromFlag(cmd, "model", &cfg.Model.Path, modelDir)
			var device int64
			if deviceMemory != "" {
				if device, err = plan.ParseSize(deviceMemory); err != nil {
					return fmt.Errorf("--device-memory: %w", err)
				}
			}
			p, err := planOf(cfg, device)
			if err != nil {
				return err
			}
			if asJSON {
				data, err := json.MarshalIndent(p.JSON(), "", "  ")
				if err != nil {
					return err
				}
				if _, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", data); err != nil {
					return err
				}
			} else if err := p.WriteText(cmd.OutOrStdout()); err != nil {
				return err
			}
			if fits, known := p.Fits(); known && !fits {
				return errors.New("plan: the configuration does not fit the device (exit status 1)")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&modelDir, "model", "", "checkpoint directory whose config.json gives the architecture (sets model.path)")
	cmd.Flags().StringVar(&deviceMemory, "device-memory", "", "the device's memory, e.g. 141GB or 80GiB (default: what the backend reports)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object: fits, total_bytes, device_bytes, parts, max_micro_batch_size, max_rollout_batch_size, …")
	return cmd
}

// planOf computes the plan of cfg on a device of deviceBytes (0 = what the
// backend reports): it reads the tokenizer for the system prompts' length
// and model.path's config.json, nothing else.
func planOf(cfg *config.Config, deviceBytes int64) (*plan.Plan, error) {
	tok, _, err := cfg.Model.LoadTokenizer()
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	guard, err := rollout.NewGuard(cfg.Rollout, tok, nil)
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	mem, judge, judgeOnly := guard.PrefixTokens()
	if cfg.Rollout.Variant == "judge-only" {
		judge = judgeOnly
	}
	if deviceBytes == 0 {
		deviceBytes, _ = backend.DeviceMemory(cfg.Model.BackendConfig)
	}
	in, err := plan.FromConfig(plan.Config{
		Model: cfg.Model, Rollout: cfg.Rollout, GRPO: cfg.GRPO, MaxTurns: cfg.Train.MaxTurns,
		MemorySystemTokens: mem, JudgeSystemTokens: judge, DeviceBytes: deviceBytes,
	})
	if err != nil {
		return nil, err
	}
	return plan.Compute(in)
}
