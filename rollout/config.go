package rollout

import (
	"fmt"

	"github.com/mageguard/mageguard/rollout/prompt"
)

// Config is the `rollout` section: how the guard is prompted and sampled.
type Config struct {
	PromptVersion        string  `yaml:"prompt_version"`         // prompt templates under rollout/prompt/prompts/<version>/
	Variant              string  `yaml:"variant"`                // "mage" (memory + judge) or "judge-only" (judge reads the raw trajectory)
	TrackIntent          bool    `yaml:"track_intent"`           // memory prompt asks to keep the user's intent and task scope (ablation: false)
	TrackAttacks         bool    `yaml:"track_attacks"`          // memory prompt asks to keep attack patterns seen (ablation: false)
	MemoryBudgetChars    int     `yaml:"memory_budget_chars"`    // the memory length the prompt asks for, in characters
	GroupSize            int     `yaml:"group_size"`             // G: chains per trajectory in training
	MaxMemoryTokens      int     `yaml:"max_memory_tokens"`      // max new tokens of a memory call
	MaxJudgeTokens       int     `yaml:"max_judge_tokens"`       // max new tokens of a judge call
	MaxObservationTokens int     `yaml:"max_observation_tokens"` // longer observations keep head and tail with an elision marker
	MaxUserTokens        int     `yaml:"max_user_tokens"`        // longer user messages (the request included) are elided the same way
	MaxArgumentTokens    int     `yaml:"max_argument_tokens"`    // a longer tool name or string in an action's arguments is elided in place
	MaxActionTokens      int     `yaml:"max_action_tokens"`      // an action still longer after that has its arguments elided as a whole
	Temperature          float64 `yaml:"temperature"`            // sampling temperature in training (log-probs use logits / temperature)
	TopK                 int     `yaml:"top_k"`                  // 0 = off
	TopP                 float64 `yaml:"top_p"`                  // 1 = off
	Structured           bool    `yaml:"structured"`             // constrain decoding to valid tool calls
	// DeclareTools declares the role's tool in each system prompt, the
	// Qwen way (a "# Tools" section). Off, the prompt holds only the
	// version's instructions: ~150 tokens less per call, for a small model
	// trained from scratch to call the tools (the synth configs). Remote
	// chat endpoints get the tool in their request either way.
	DeclareTools bool `yaml:"declare_tools"`
	BatchSize    int  `yaml:"batch_size"` // max rows per generation call

	// generator, endpoint, remote_*: which generator runs the calls (remote.go).
	RemoteConfig `yaml:",inline"`
}

// DefaultConfig returns the defaults for a real (Qwen3-4B class) model.
func DefaultConfig() Config {
	return Config{
		PromptVersion:        "v1",
		Variant:              "mage",
		TrackIntent:          true,
		TrackAttacks:         true,
		MemoryBudgetChars:    600,
		GroupSize:            8,
		MaxMemoryTokens:      256,
		MaxJudgeTokens:       96,
		MaxObservationTokens: 1024,
		MaxUserTokens:        1024,
		MaxArgumentTokens:    512,
		MaxActionTokens:      1024,
		Temperature:          1.0,
		TopK:                 0,
		TopP:                 1.0,
		Structured:           false,
		DeclareTools:         true,
		BatchSize:            64,

		RemoteConfig: DefaultRemoteConfig(),
	}
}

// PromptOptions returns the prompt keys, for prompt.NewPrompts.
func (c *Config) PromptOptions() prompt.Options {
	return prompt.Options{Version: c.PromptVersion, TrackIntent: c.TrackIntent, TrackAttacks: c.TrackAttacks, BudgetChars: c.MemoryBudgetChars}
}

// MinTemperature and MaxTemperature bound a sampling temperature: logits
// are divided by it in float32, so a tiny one overflows them to ±Inf (1e-45
// made every sampled step fail) and a huge one flattens them to uniform.
// Below 0.01 sampling is all but greedy already.
const (
	MinTemperature = 0.01
	MaxTemperature = 100.0
)

// Validate checks the values; errors start with the key's name.
func (c *Config) Validate() error {
	switch {
	case c.Variant != "mage" && c.Variant != "judge-only":
		return fmt.Errorf("variant must be mage or judge-only, got %q", c.Variant)
	case c.PromptVersion == "":
		return fmt.Errorf("prompt_version must not be empty")
	case c.MemoryBudgetChars <= 0:
		return fmt.Errorf("memory_budget_chars must be > 0, got %d", c.MemoryBudgetChars)
	case c.GroupSize < 1:
		return fmt.Errorf("group_size must be >= 1, got %d", c.GroupSize)
	case c.MaxMemoryTokens < 1:
		return fmt.Errorf("max_memory_tokens must be >= 1, got %d", c.MaxMemoryTokens)
	case c.MaxJudgeTokens < 1:
		return fmt.Errorf("max_judge_tokens must be >= 1, got %d", c.MaxJudgeTokens)
	case c.MaxObservationTokens < 16:
		return fmt.Errorf("max_observation_tokens must be >= 16, got %d", c.MaxObservationTokens)
	case c.MaxUserTokens < 16:
		return fmt.Errorf("max_user_tokens must be >= 16, got %d", c.MaxUserTokens)
	case c.MaxArgumentTokens < 16:
		return fmt.Errorf("max_argument_tokens must be >= 16, got %d", c.MaxArgumentTokens)
	case c.MaxActionTokens < c.MaxArgumentTokens:
		return fmt.Errorf("max_action_tokens must be >= max_argument_tokens (%d), got %d", c.MaxArgumentTokens, c.MaxActionTokens)
	case !(c.Temperature >= MinTemperature && c.Temperature <= MaxTemperature):
		return fmt.Errorf("temperature must be in [%g, %g] (eval decodes greedily on its own), got %g", MinTemperature, MaxTemperature, c.Temperature)
	case c.TopK < 0:
		return fmt.Errorf("top_k must be >= 0, got %d", c.TopK)
	case !(c.TopP > 0 && c.TopP <= 1):
		return fmt.Errorf("top_p must be in (0, 1], got %g", c.TopP)
	case c.BatchSize < 1:
		return fmt.Errorf("batch_size must be >= 1, got %d", c.BatchSize)
	}
	return c.RemoteConfig.Validate()
}
