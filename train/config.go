// Package train is mageguard's main job: turn-wise GRPO on labeled
// trajectories, end to end. Each step samples trajectories, runs G
// shadow-memory chains of the guard over each (rollout), scores every turn
// (rewards), turns the scores into per-turn per-phase advantages and
// updates the model (grpo), and writes metrics and Hugging Face checkpoints.
//
// Data flows one way: dataset → rollout → rewards → grpo → checkpoint.
package train

import "fmt"

// Config is the `train` section.
type Config struct {
	Data            string `yaml:"data"`             // training trajectories (.jsonl or .parquet)
	Steps           int    `yaml:"steps"`            // training steps (each: one rollout batch, num_iterations optimizer steps)
	Trajectories    int    `yaml:"trajectories"`     // trajectories per step (each runs rollout.group_size chains)
	Balance         bool   `yaml:"balance"`          // half of each step from attack runs with a label-1 action, half from the rest
	MaxTurns        int    `yaml:"max_turns"`        // longer trajectories are cut to one window of this many turns (0 = no cut)
	Seed            uint64 `yaml:"seed"`             // seeds trajectory sampling and generation (with the step number)
	SaveEvery       int    `yaml:"save_every"`       // write a checkpoint every N steps (and always at the end; 0 = only at the end)
	KeepLast        int    `yaml:"keep_last"`        // keep the newest N step checkpoints (checkpoint-best is kept apart; 0 = all)
	EvalEvery       int    `yaml:"eval_every"`       // run a held-out eval every N steps (0 = never)
	EvalData        string `yaml:"eval_data"`        // held-out trajectories for eval_every
	EvalLimit       int    `yaml:"eval_limit"`       // evaluate at most this many eval trajectories (0 = all)
	BestMetric      string `yaml:"best_metric"`      // report.json metric that picks checkpoint-best, e.g. "f1" or "-asr" (leading '-' = lower is better)
	LogRollouts     bool   `yaml:"log_rollouts"`     // write rollouts.jsonl: a line per step × trajectory × turn × chain
	LogTexts        bool   `yaml:"log_texts"`        // also write the memory and judge completions' texts in rollouts.jsonl
	LogTokens       bool   `yaml:"log_tokens"`       // write tokens.jsonl: every trained sequence's per-token log-probs and loss terms, per optimizer iteration (GRPO only)
	CheckpointDType string `yaml:"checkpoint_dtype"` // dtype of saved weights: float32 | bfloat16 ("" = the model's)

	// MemoryOnly leaves the judge calls out of GRPO's update: only the
	// memory calls' sequences are trained on (the judge's rewards and
	// advantages are still computed and logged). The two roles share the
	// model's weights, so the judge still moves with the memory's updates,
	// but no judge advantage pushes it. Off by default (both roles, the
	// paper's).
	MemoryOnly bool `yaml:"memory_only"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Data:         "data/agentdojo-mini/train.jsonl",
		Steps:        100,
		Trajectories: 8,
		Balance:      true,
		MaxTurns:     8,
		Seed:         1,
		SaveEvery:    50,
		KeepLast:     2,
		EvalData:     "data/agentdojo-mini/eval.jsonl",
		BestMetric:   "f1",
	}
}

// Validate checks the values; errors start with the key's name.
func (c *Config) Validate() error {
	switch {
	case c.Data == "":
		return fmt.Errorf("data must name a trajectories file")
	case c.Steps < 1:
		return fmt.Errorf("steps must be >= 1, got %d", c.Steps)
	case c.Trajectories < 1:
		return fmt.Errorf("trajectories must be >= 1, got %d", c.Trajectories)
	case c.MaxTurns < 0:
		return fmt.Errorf("max_turns must be >= 0, got %d", c.MaxTurns)
	case c.SaveEvery < 0:
		return fmt.Errorf("save_every must be >= 0, got %d", c.SaveEvery)
	case c.KeepLast < 0:
		return fmt.Errorf("keep_last must be >= 0, got %d", c.KeepLast)
	case c.EvalEvery < 0:
		return fmt.Errorf("eval_every must be >= 0, got %d", c.EvalEvery)
	case c.EvalEvery > 0 && c.EvalData == "":
		return fmt.Errorf("eval_data must be set when eval_every > 0")
	case c.EvalLimit < 0:
		return fmt.Errorf("eval_limit must be >= 0, got %d", c.EvalLimit)
	case c.CheckpointDType != "" && c.CheckpointDType != "float32" && c.CheckpointDType != "bfloat16":
		return fmt.Errorf("checkpoint_dtype must be float32 or bfloat16, got %q", c.CheckpointDType)
	}
	return nil
}
