package eval

import (
	"fmt"

	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
)

// Config is the `eval` section: which trajectories `mageguard eval` runs
// the guard over and how the guard's calls are decoded. The guard itself
// (variant, prompts, memory ablations, token budgets, structured decoding)
// is the `rollout` section.
type Config struct {
	Data            string  `yaml:"data"`             // held-out trajectories (.jsonl or .parquet)
	Greedy          bool    `yaml:"greedy"`           // argmax decoding; false samples with rollout.temperature, top_k, top_p
	Votes           int     `yaml:"votes"`            // K judge calls per turn, the majority decides (consensus baseline; 1 = one call)
	VoteTemperature float64 `yaml:"vote_temperature"` // sampling temperature of the K judge calls when votes > 1
	Limit           int     `yaml:"limit"`            // evaluate the first N trajectories that have an action (0 = all)
	Seed            uint64  `yaml:"seed"`             // seeds every sampled call (votes, or greedy: false)
	Chunk           int     `yaml:"chunk"`            // trajectories per guard run: their calls at a turn form one generation batch (0 = rollout.batch_size)
}

// DefaultConfig returns the defaults: the bundled held-out split, greedy,
// one judge call per turn, every trajectory.
func DefaultConfig() Config {
	return Config{
		Data:            "data/agentdojo-mini/eval.jsonl",
		Greedy:          true,
		Votes:           1,
		VoteTemperature: 1.0,
		Limit:           0,
		Seed:            1,
		Chunk:           0,
	}
}

// Validate checks the values; errors start with the key's name.
func (c *Config) Validate() error {
	switch {
	case c.Data == "":
		return fmt.Errorf("data must name a trajectories file")
	case c.Votes < 1:
		return fmt.Errorf("votes must be >= 1, got %d", c.Votes)
	case !(c.VoteTemperature >= rollout.MinTemperature && c.VoteTemperature <= rollout.MaxTemperature):
		return fmt.Errorf("vote_temperature must be in [%g, %g] (greedy votes would all agree), got %g", rollout.MinTemperature, rollout.MaxTemperature, c.VoteTemperature)
	case c.Limit < 0:
		return fmt.Errorf("limit must be >= 0, got %d", c.Limit)
	case c.Chunk < 0:
		return fmt.Errorf("chunk must be >= 0, got %d", c.Chunk)
	}
	return nil
}

// Options turns the section into Evaluate's options, taking the sampling
// temperature, top-k and top-p of non-greedy calls (and top-k / top-p of
// votes) and the default chunk size from the rollout section r.
func (c *Config) Options(r rollout.Config) Options {
	o := Options{
		Sampling: generate.Sampling{Greedy: true, Temperature: 1, TopP: 1, Seed: c.Seed},
		Votes:    c.Votes,
		Limit:    c.Limit,
		Chunk:    c.Chunk,
		// Only for progress inside a chunk (Options.Meter).
		MemoryCalls: r.Variant == "mage",
	}
	if !c.Greedy {
		o.Sampling = generate.Sampling{Temperature: r.Temperature, TopK: r.TopK, TopP: r.TopP, Seed: c.Seed}
	}
	if c.Votes > 1 {
		o.VoteSampling = generate.Sampling{Temperature: c.VoteTemperature, TopK: r.TopK, TopP: r.TopP, Seed: c.Seed}
	}
	if o.Chunk == 0 {
		o.Chunk = r.BatchSize
	}
	return o
}
