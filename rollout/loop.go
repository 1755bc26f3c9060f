package rollout

import (
	"fmt"
	"strings"
	"time"

	"github.com/mageguard/mageguard/internal/seed"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/prompt"
)

// Role is a guard role: which tool it answers with.
type Role int

const (
	MemoryRole Role = iota // the memory manager: update_memory
	JudgeRole              // the judge: assess_risk
)

func (r Role) String() string {
	if r == MemoryRole {
		return "memory"
	}
	return "judge"
}

// RunOptions say how many chains run and how they are sampled.
type RunOptions struct {
	Chains   int               // chains per episode (G in training, 1 in eval)
	Sampling generate.Sampling // how memory and judge calls are drawn
	// Votes > 1 makes K = Votes judge calls per turn (each sampled with
	// VoteSampling), whose majority is the decision (consensus baseline).
	Votes        int
	VoteSampling generate.Sampling
}

// Run runs opts.Chains chains of the guard loop over each episode, turn by
// turn, batching the calls of all chains and episodes at a turn into one
// generation: for each turn, the memory call (m_t = M(m_{t−1}, s_{t−1})),
// then the judge call (d_t = J(a_t | m_t)). Every turn of every chain runs
// (the unabridged loop: a reject does not stop the chain), so every label
// is used. A memory call that fails to parse keeps m_{t−1}; a judge call
// that fails to parse counts as "reject".
//
// Sampling seeds are derived from the options' seeds and the turn, so a
// run is reproducible.
func (g *Guard) Run(episodes []*Episode, opts RunOptions) ([]*Chain, Stats, error) {
	var stats Stats
	chains, s := opts.Chains, opts.Sampling
	if chains < 1 {
		return nil, stats, fmt.Errorf("rollout: chains must be >= 1, got %d", chains)
	}
	views := make([]*episodeView, len(episodes))
	maxT := 0
	for i, e := range episodes {
		views[i] = g.view(e, &stats)
		maxT = max(maxT, e.End-e.Start)
	}
	var all []*Chain
	for _, e := range episodes {
		for c := 0; c < chains; c++ {
			all = append(all, &Chain{Episode: e, Index: c})
		}
	}
	viewOf := func(ch *Chain, i int) *episodeView { return views[i/chains] }

	for t := 0; t < maxT; t++ {
		// The chains still running at turn t (episodes longer than t).
		var live []int
		for i, ch := range all {
			if t < ch.Episode.End-ch.Episode.Start {
				live = append(live, i)
			}
		}
		turns := make([]Turn, len(live))
		for k, i := range live {
			e := all[i].Episode
			turns[k] = Turn{Index: e.Start + t, Label: e.Traj.Turns[e.Start+t].Label}
		}

		// Memory calls.
		if g.cfg.Variant == "mage" {
			reqs := make([]generate.Request, len(live))
			calls := make([]*Call, len(live))
			for k, i := range live {
				prev := ""
				if t > 0 {
					prev = all[i].Turns[t-1].MemoryOut
				}
				calls[k] = g.memoryCall(viewOf(all[i], i), t, prev)
				reqs[k] = g.Request(calls[k], MemoryRole)
			}
			if err := g.generate(reqs, calls, s, uint64(2*t), &stats); err != nil {
				return nil, stats, fmt.Errorf("turn %d memory calls of %s: %w", t, trajectoryIDs(all, live), err)
			}
			for k, i := range live {
				prev := ""
				if t > 0 {
					prev = all[i].Turns[t-1].MemoryOut
				}
				turns[k].Memory = calls[k]
				turns[k].MemoryOut = g.memoryOutcome(calls[k], prev, &stats)
			}
		}

		// Judge calls.
		reqs := make([]generate.Request, len(live))
		calls := make([]*Call, len(live))
		for k, i := range live {
			calls[k] = g.judgeCall(viewOf(all[i], i), t, turns[k].MemoryOut)
			reqs[k] = g.Request(calls[k], JudgeRole)
		}
		votes := max(opts.Votes, 1)
		for v := 0; v < votes; v++ {
			vcalls, vs := calls, s
			if votes > 1 {
				vs = opts.VoteSampling
				vcalls = make([]*Call, len(calls))
				for k := range calls {
					cp := *calls[k]
					vcalls[k] = &cp
				}
			}
			if err := g.generate(reqs, vcalls, vs, uint64(2*t+1)+uint64(v)<<32, &stats); err != nil {
				return nil, stats, fmt.Errorf("turn %d judge calls of %s: %w", t, trajectoryIDs(all, live), err)
			}
			for k := range live {
				c := vcalls[k]
				j := g.judgeOutcome(c, &stats)
				if v == 0 {
					turns[k].Judge = *c
					turns[k].Decision, turns[k].Rationale = j.Decision, j.Rationale
					turns[k].ScoreExact = true
				}
				turns[k].Score += j.Score / float64(votes)
				turns[k].ScoreExact = turns[k].ScoreExact && j.ScoreExact
				if votes > 1 {
					turns[k].Votes = append(turns[k].Votes, *c)
				}
			}
		}
		for k, i := range live {
			if votes > 1 {
				turns[k].Decision = Majority(turns[k].VoteDecisions())
			}
			all[i].Turns = append(all[i].Turns, turns[k])
		}
	}
	return all, stats, nil
}

// FallbackRationale is the rationale of the fallback reject that a judge
// format violation gets.
const FallbackRationale = "format violation: rejected by default"

// Majority returns the majority of K judge decisions: "approve" only when a
// strict majority approves; a tie or no votes is "reject" (fail safe).
func Majority(decisions []string) string {
	approve := 0
	for _, d := range decisions {
		if d == prompt.DecisionApprove {
			approve++
		}
	}
	if 2*approve > len(decisions) {
		return prompt.DecisionApprove
	}
	return prompt.DecisionReject
}

// trajectoryIDs names the trajectories of the live chains, for errors.
func trajectoryIDs(all []*Chain, live []int) string {
	var ids []string
	seen := map[string]bool{}
	for _, i := range live {
		id := all[i].Episode.Traj.ID
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) > 3 {
		return fmt.Sprintf("%s and %d more trajectories", strings.Join(ids[:3], ", "), len(ids)-3)
	}
	return strings.Join(ids, ", ")
}

// generate runs the requests in batches of the configured size and fills
// the calls' completions.
func (g *Guard) generate(reqs []generate.Request, calls []*Call, s generate.Sampling, salt uint64, stats *Stats) error {
	bs := g.cfg.BatchSize
	for lo := 0; lo < len(reqs); lo += bs {
		hi := min(lo+bs, len(reqs))
		ss := s
		ss.Seed = seed.Mix(s.Seed, salt, uint64(lo))
		start := time.Now()
		outs, err := g.gen.Generate(reqs[lo:hi], ss)
		elapsed := time.Since(start)
		if err != nil {
			return err
		}
		if len(outs) != hi-lo {
			return fmt.Errorf("generator returned %d completions for %d requests", len(outs), hi-lo)
		}
		for k, out := range outs {
			c := calls[lo+k]
			c.Completion, c.LogProbs, c.Forced = out.Tokens, out.LogProbs, out.Forced
			c.Watch, c.Usage, c.Text = out.Watch, out.Usage, out.Text
			c.Time, c.Prefill = elapsed, min(out.Prefill, elapsed)
			if c.Text == "" {
				c.Text = g.tok.Decode(out.Tokens, false)
			}
			stats.Calls++
			if c.Usage != nil {
				// The server's own count: our system prompt's share is at most all of it.
				c.PrefixTokens = min(c.PrefixTokens, c.Usage.PromptTokens+c.Usage.CompletionTokens)
				stats.PromptTokens += c.Usage.PromptTokens
				stats.NewTokens += c.Usage.CompletionTokens
			} else {
				stats.PromptTokens += len(c.Prompt)
				stats.NewTokens += len(out.Tokens)
			}
		}
	}
	return nil
}
