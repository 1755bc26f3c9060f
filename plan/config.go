package plan

import (
	"fmt"

	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/rollout"
)

// Sizes of a guard call that the configuration does not bound, from the
// AgentDojo data (docs/design.md#prompts-and-untrusted-text): an action is
// 190 tokens at p99 (ActionTokens covers it with a user message), and the
// chat template, the blocks' delimiters and an elision marker take
// ScaffoldTokens.
const (
	ActionTokens   = 256
	ScaffoldTokens = 64
)

// judgeOnlyTurns is the turns a judge-only prompt holds when train.max_turns
// is 0 (no cut): AgentDojo's longest runs.
const judgeOnlyTurns = 16

// Config is what a plan reads of a mageguard configuration.
type Config struct {
	Model    model.Settings
	Rollout  rollout.Config
	GRPO     grpo.Config
	MaxTurns int // train.max_turns: a judge-only prompt holds that many steps

	// MemorySystemTokens and JudgeSystemTokens are the tokens of the
	// memory and judge system prompts (rollout.Guard.PrefixTokens; the
	// judge-only one for that variant): the prefix a micro-batch's or a
	// generation batch's rows share.
	MemorySystemTokens, JudgeSystemTokens int

	DeviceBytes int64 // the device's memory (0 = unknown)
}

// FromConfig turns a configuration into a plan's inputs: the architecture of
// model.path's config.json when it is set (it wins over the model.* keys; an
// adapter checkpoint's base's, with its adapter), else the keys; model.lora's
// adapter with a rank; the longest guard call each phase runs (a memory call:
// its system prompt, the previous memory and the completion at
// max_memory_tokens, an observation at max_observation_tokens, an action;
// judge-only: max_turns steps of observation and action); micro-batches of
// micro_batch_size such rows and generation batches of rollout.batch_size;
// with the local generator, each role's system prompt kept prefilled.
func FromConfig(c Config) (Inputs, error) {
	var in Inputs
	arch := c.Model.Config
	if c.Model.LoRA.Rank > 0 {
		in.LoRA = LoRA{Rank: c.Model.LoRA.Rank, Targets: c.Model.LoRA.Targets}
	}
	if c.Model.Path != "" {
		// An adapter checkpoint: its base's architecture, its adapter.
		base, lora, err := model.AdapterOf(c.Model.Path)
		if err != nil {
			return in, fmt.Errorf("plan: model.path: %w", err)
		}
		if lora != nil {
			in.LoRA = LoRA{Rank: lora.Rank, Targets: lora.Targets}
		}
		a, err := model.LoadConfig(base)
		if err != nil {
			return in, fmt.Errorf("plan: model.path: %w", err)
		}
		arch = *a
	}
	dt, err := model.ParseDType(c.Model.DType)
	if err != nil {
		return in, fmt.Errorf("plan: model.%w", err)
	}
	in.Arch = arch
	in.WeightBytes = int(dt.Size())
	// float32 master weights when grpo.master_dtype (float32) differs from model.dtype.
	if in.WeightBytes != f32 && c.GRPO.MasterDType == "float32" {
		in.MasterBytes = f32
	}
	in.Reference = c.GRPO.Beta > 0
	in.MicroBatchSize = c.GRPO.MicroBatchSize
	in.SharedPrefix = c.GRPO.SharedPrefix
	in.Checkpointing = c.GRPO.GradientCheckpointing
	in.UpdateGroupLayers = c.GRPO.UpdateGroupLayers
	in.LMHeadChunk = c.Model.LMHeadChunk
	in.AttentionBlock = c.Model.AttentionBlock
	in.InPlace = c.Model.BackendConfig.Name != "xla"
	in.DeviceBytes = c.DeviceBytes
	in.UsableFraction = c.Model.BackendConfig.UsableFraction()

	r := c.Rollout
	prefix, own, completion := c.MemorySystemTokens, 0, r.MaxMemoryTokens
	if r.Variant == "judge-only" {
		turns := c.MaxTurns
		if turns == 0 {
			turns = judgeOnlyTurns
		}
		prefix, completion = c.JudgeSystemTokens, r.MaxJudgeTokens
		own = ActionTokens + turns*(r.MaxObservationTokens+ActionTokens+ScaffoldTokens) + completion
	} else {
		memory := r.MaxMemoryTokens + r.MaxObservationTokens + ActionTokens + ScaffoldTokens + r.MaxMemoryTokens
		judge := r.MaxMemoryTokens + ActionTokens + ScaffoldTokens + r.MaxJudgeTokens
		if c.JudgeSystemTokens+judge > prefix+memory {
			prefix, completion = c.JudgeSystemTokens, r.MaxJudgeTokens
			memory = judge
		}
		own = memory
	}
	if r.Generator != rollout.GeneratorOpenAI {
		switch {
		case r.Variant == "judge-only" && c.JudgeSystemTokens > 0:
			in.KeptPrefixes = []int{c.JudgeSystemTokens}
		case r.Variant != "judge-only" && c.MemorySystemTokens > 0 && c.JudgeSystemTokens > 0:
			in.KeptPrefixes = []int{c.MemorySystemTokens, c.JudgeSystemTokens}
		}
	}
	in.Train = TrainShape{Rows: in.MicroBatchSize, PrefixTokens: prefix, RowTokens: own, TargetTokens: completion}
	in.Rollout = RolloutShape{Rows: r.BatchSize, PrefixTokens: prefix, PromptTokens: prefix + own - completion, NewTokens: completion}
	return in, nil
}
