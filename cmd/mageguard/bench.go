package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/bench"
	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/plan"
)

// benchResult is what `mageguard model bench --json` prints.
type benchResult struct {
	Backend    string `json:"backend"`
	Model      string `json:"model"`
	Parameters int64  `json:"parameters"`
	DType      string `json:"dtype"`

	// LoRA describes the adapter trained instead of the weights (model.lora), with its
	// parameter count; empty for full fine-tuning.
	LoRA              string `json:"lora,omitempty"`
	TrainedParameters int64  `json:"trained_parameters,omitempty"`

	// Decode runs first, with only the weights held; then the training step,
	// with the trainer's state (and the reference when grpo.beta > 0).
	Decode *bench.DecodeResult `json:"decode,omitempty"`
	Train  *bench.TrainResult  `json:"train,omitempty"`
	// MFU is the training step's model FLOPs per second over PeakFLOPs.
	MFU       float64 `json:"mfu,omitempty"`
	PeakFLOPs float64 `json:"peak_flops,omitempty"`
	// The plan's figures for these shapes (mageguard plan): the weights
	// with the larger of the prefill and decoding phases, and the training
	// step's total (resident state and its largest phase).
	PlanDecodeBytes int64  `json:"plan_decode_bytes,omitempty"`
	PlanTrainBytes  int64  `json:"plan_train_bytes,omitempty"`
	PlanTrainPeak   string `json:"plan_train_peak,omitempty"`
}

// benchFlags are model bench's flags.
type benchFlags struct {
	dir                                 string
	train                               bench.TrainShape
	decode                              bench.DecodeShape
	steps                               int
	skipTrain, skipDecode, heap, asJSON bool
	peakFLOPs                           float64
}

func newModelBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [--model DIR] [--train-rows N ...] [--decode-rows N ...] [--json]",
		Short: "Time a GRPO training step and batched decoding on random data, with the plan's memory figures beside them",
		Long: `bench loads the model of the model section (--model DIR, or a random one from
the model.* keys), then times greedy decoding of --decode-rows random prompts
(--decode-prompt-tokens each, the first --decode-prefix-tokens shared, as a
system prompt is) for --decode-new-tokens steps, and one turn-wise GRPO
optimizer step (grpo section: micro-batches, β, AdamW) on --train-rows random
sequences of one role (--train-prefix-tokens shared, --train-row-tokens of
their own, the last --train-target-tokens in the loss), after an untimed
step that compiles. It prints tokens per second, the step's model FLOPs and
their utilisation of --peak-flops, and mageguard plan's memory figures for
the same shapes. With model.lora.rank (--set model.lora.rank=16) the step
trains a LoRA adapter on the frozen model, its reference the base. With --heap (pure-Go backend) it samples the Go heap, the
backend's memory, with the garbage collector at 5% (slower).

This is what scripts/gpu-check.sh times on a GPU, where no Go toolchain is at
hand.

  mageguard model bench --config configs/tiny.yaml --json
  mageguard model bench --config configs/default.yaml --model /tmp/qwen3-4b-2l --set model.xla_preallocate=false --json`,
		Args: cobra.NoArgs,
		RunE: f.run,
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "model", "", "checkpoint directory (sets model.path; default: a random model from model.*)")
	fl.IntVar(&f.train.Rows, "train-rows", 8, "sequences in the training step")
	fl.IntVar(&f.train.PrefixTokens, "train-prefix-tokens", 64, "tokens every training sequence starts with (a system prompt)")
	fl.IntVar(&f.train.RowTokens, "train-row-tokens", 192, "tokens of each training sequence after the prefix")
	fl.IntVar(&f.train.TargetTokens, "train-target-tokens", 64, "completion tokens of each training sequence (in the loss)")
	fl.IntVar(&f.steps, "steps", 2, "timed training steps")
	fl.IntVar(&f.decode.Rows, "decode-rows", 8, "prompts decoded together")
	fl.IntVar(&f.decode.PrefixTokens, "decode-prefix-tokens", 64, "tokens every prompt starts with")
	fl.IntVar(&f.decode.PromptTokens, "decode-prompt-tokens", 128, "tokens of each prompt")
	fl.IntVar(&f.decode.NewTokens, "decode-new-tokens", 32, "decoding steps")
	fl.BoolVar(&f.skipTrain, "skip-train", false, "do not time a training step")
	fl.BoolVar(&f.skipDecode, "skip-decode", false, "do not time decoding")
	fl.BoolVar(&f.heap, "heap", false, "sample the Go heap (backend go), GC at 5%")
	fl.Float64Var(&f.peakFLOPs, "peak-flops", 790e12, "the device's peak FLOP/s for the MFU (default: an H200's dense bfloat16)")
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object")
	return cmd
}

// run loads the model, times decoding and a training step as the flags
// say, and prints them beside the plan's figures for the same shapes.
// benchAdapter gives m a new LoRA adapter when model.lora asks for one (the step then trains
// it alone, on the frozen model) and describes the adapter m trains in res.
func benchAdapter(m *model.Model, s *model.Settings, res *benchResult) error {
	if s.LoRA.Rank > 0 && m.Adapter() == nil {
		if err := m.AddAdapter(s.LoRA, s.Seed, s.Path); err != nil {
			return fmt.Errorf("model bench: %w", err)
		}
	}
	if a := m.Adapter(); a != nil {
		res.LoRA, res.TrainedParameters = a.String(), model.NumAdapterParameters(m.Config(), a.Rank, a.Targets)
	}
	return nil
}

func (f *benchFlags) run(cmd *cobra.Command, _ []string) error {
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	if f.skipTrain && f.skipDecode {
		return errors.New("model bench: nothing to do (--skip-train and --skip-decode)")
	}
	s := cfg.Model
	if f.dir != "" {
		s.Path = f.dir
	}
	if f.heap {
		if s.BackendConfig.Name == "xla" {
			return errors.New("model bench: --heap samples the Go heap, which holds the tensors only on backend go")
		}
		s.BackendConfig.GCPercent = 0 // leave the GC percentage to this command
		debug.SetGCPercent(5)
	}
	m, err := loadModel(s)
	if err != nil {
		return fmt.Errorf("model bench: %w", err)
	}
	res := benchResult{Backend: m.Backend().Name(), Model: m.Config().String(), Parameters: m.NumParameters(), DType: s.DType}
	if err := benchAdapter(m, &s, &res); err != nil {
		return err
	}

	// The plan of these shapes.
	p, err := planOf(cfg, 0)
	if err != nil {
		return err
	}
	in := p.Inputs
	in.Arch = *m.Config()
	in.Train = plan.TrainShape(f.train)
	in.Rollout = plan.RolloutShape(f.decode)
	bp, err := plan.Compute(in)
	if err != nil {
		return fmt.Errorf("model bench: %w", err)
	}

	if !f.skipDecode {
		if res.Decode, err = bench.Decode(m, f.decode, uint64(s.Seed), f.heap); err != nil {
			return err
		}
		res.PlanDecodeBytes = bp.GenerationTotal()
	}
	if !f.skipTrain {
		opts := bench.TrainOptions{Steps: f.steps, Temperature: cfg.Rollout.Temperature, Seed: uint64(s.Seed), Heap: f.heap}
		if cfg.GRPO.Beta > 0 && m.Adapter() != nil {
			opts.Reference = model.WithoutAdapter(m.Context()) // the frozen base
		} else if cfg.GRPO.Beta > 0 {
			if opts.Reference, err = grpo.FrozenCopy(m.Context()); err != nil {
				return err
			}
		}
		if res.Train, err = bench.TrainStep(m, cfg.GRPO, f.train, opts); err != nil {
			return err
		}
		res.PeakFLOPs = f.peakFLOPs
		if f.peakFLOPs > 0 {
			res.MFU = res.Train.FLOPsPerSecond / f.peakFLOPs
		}
		res.PlanTrainBytes, res.PlanTrainPeak = bp.TrainTotal()
	}
	if f.asJSON {
		data, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s\n", data)
		return err
	}
	printBench(cmd.OutOrStdout(), &res)
	return nil
}

// printBench writes res for people.
func printBench(out io.Writer, res *benchResult) {
	fmt.Fprintf(out, "%s, %s: %s, %d parameters\n", res.Backend, res.DType, res.Model, res.Parameters)
	if d := res.Decode; d != nil {
		fmt.Fprintf(out, "decode: %d rows × %d prompt tokens: prefill %.3f s, %.2f ms a step, %.0f tokens/s; plan %s",
			d.Shape.Rows, d.Shape.PromptTokens, d.PrefillSeconds, 1e3*d.StepSeconds, d.TokensPerSecond, plan.FormatSize(res.PlanDecodeBytes))
		if d.HeapPeakBytes > 0 {
			fmt.Fprintf(out, ", Go heap peak %s", plan.FormatSize(int64(d.HeapPeakBytes)))
		}
		fmt.Fprintln(out)
	}
	if t := res.Train; t != nil {
		fmt.Fprintf(out, "train step: %d rows × (%d + %d) tokens: %.3f s, %.0f tokens/s, %.3g FLOP/s (MFU %.4f of %.3g); plan %s (%s)",
			t.Shape.Rows, t.Shape.PrefixTokens, t.Shape.RowTokens, t.Seconds, t.TokensPerSecond, t.FLOPsPerSecond, res.MFU, res.PeakFLOPs,
			plan.FormatSize(res.PlanTrainBytes), res.PlanTrainPeak)
		if t.HeapPeakBytes > 0 {
			fmt.Fprintf(out, ", Go heap peak %s", plan.FormatSize(int64(t.HeapPeakBytes)))
		}
		fmt.Fprintln(out)
	}
}
