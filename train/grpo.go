package train

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/internal/seed"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/rewards"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/prompt"
)

// Metrics is one line of a GRPO run's metrics.jsonl: one step
// (docs/design.md#metrics).
type Metrics struct {
	Step                int            `json:"step"`
	RewardJudge         float64        `json:"reward_judge"`    // mean judge reward r^J over turns × chains
	RewardMemory        float64        `json:"reward_memory"`   // mean memory reward r^M
	AccuracyJudge       float64        `json:"accuracy_judge"`  // fraction of judge calls that parsed and were right (mean c)
	AccuracyMemory      float64        `json:"accuracy_memory"` // mean discounted correctness Σγ^{k−t}c_k / Σγ^{k−t} (r^M before penalties)
	JudgeViolationRate  float64        `json:"judge_format_violation_rate"`
	MemoryViolationRate float64        `json:"memory_format_violation_rate"`
	MemoryChars         float64        `json:"memory_chars"`        // mean |m_t| in code points
	RejectRate          float64        `json:"reject_rate"`         // fraction of effective decisions that are reject
	NonzeroAdvantages   float64        `json:"nonzero_advantages"`  // fraction of sequences with a non-zero advantage
	Loss                float64        `json:"loss"`                // GRPO loss of the last optimizer step
	GradNorm            float64        `json:"grad_norm"`           // before clipping
	KL                  float64        `json:"kl"`                  // mean k3 KL to the reference
	ClipFraction        float64        `json:"clip_fraction"`       // fraction of tokens whose clipped term was active
	Ratio               float64        `json:"ratio"`               // mean π_θ/π_old
	Entropy             float64        `json:"entropy"`             // mean −log π of the counted tokens
	LR                  float64        `json:"lr"`                  // learning rate of the last optimizer step
	Sequences           int            `json:"sequences"`           // memory + judge completions trained on
	CompletionTokens    int            `json:"completion_tokens"`   // completion tokens counted in the loss
	GeneratedTokens     int            `json:"generated_tokens"`    // tokens sampled in the rollout
	PromptTokens        int            `json:"prompt_tokens"`       // prompt tokens read in the rollout
	ElidedObservations  int            `json:"elided_observations"` // observations cut to rollout.max_observation_tokens
	ElidedTokens        int            `json:"elided_tokens"`       // observation tokens left out by those cuts
	TokensPerSecond     float64        `json:"tokens_per_s"`        // (prompt + generated + trained tokens) / step seconds
	RolloutSeconds      float64        `json:"rollout_seconds"`
	UpdateSeconds       float64        `json:"update_seconds"`
	Seconds             float64        `json:"seconds"`        // the whole step
	Elapsed             float64        `json:"elapsed"`        // seconds since the run (or resume) started
	Eval                map[string]any `json:"eval,omitempty"` // held-out metrics (report.json, top level) on eval steps

	// With grpo.rollout_correction (absent without), over the counted
	// tokens of the last optimizer step: the weights c, the fraction whose
	// weight is 0, and the mean of r − 1 − log r with r = π_old/π_rollout
	// per token (an estimate of KL(π_rollout ‖ π_old)).
	RolloutWeightMean *float64 `json:"rollout_weight_mean,omitempty"`
	RolloutWeightMax  *float64 `json:"rollout_weight_max,omitempty"`
	RolloutMasked     *float64 `json:"rollout_masked,omitempty"`
	RolloutKL         *float64 `json:"rollout_kl,omitempty"`

	// With dynamic sampling (absent without): the draws of
	// train.trajectories trajectories the step took (1 + extra draws), and
	// how many trajectories with a non-zero advantage it trained on.
	DynamicDraws *int `json:"dynamic_draws,omitempty"`
	DynamicKept  *int `json:"dynamic_kept,omitempty"`

	// With rollouts on a server: the name of the adapter the step's
	// rollouts requested (the weights after the previous step).
	ServedAdapter string `json:"served_adapter,omitempty"`

	// Actions and user messages elided (rollout.max_argument_tokens,
	// max_action_tokens and max_user_tokens), and the tokens left out.
	ElidedArguments    int `json:"elided_arguments"`     // action names and argument strings cut in place
	ElidedActions      int `json:"elided_actions"`       // actions whose arguments were cut as a whole
	ElidedActionTokens int `json:"elided_action_tokens"` // action tokens left out by both
	ElidedUserMessages int `json:"elided_user_messages"` // user messages, the request included
	ElidedUserTokens   int `json:"elided_user_tokens"`   // user-message tokens left out
}

func (m *Metrics) setEval(ev map[string]any) { m.Eval = ev }
func (m *Metrics) elapsed() float64          { return m.Elapsed }

func (m *Metrics) summary() string {
	return fmt.Sprintf("reward judge %.3f memory %.3f  acc %.3f  reject %.2f  violations %.2f/%.2f  mem %4.0f chars  loss %.4f  kl %.4f  %.0f tok/s  %.1fs (rollout %.1fs, update %.1fs)%s",
		m.RewardJudge, m.RewardMemory, m.AccuracyJudge, m.RejectRate, m.MemoryViolationRate, m.JudgeViolationRate,
		m.MemoryChars, m.Loss, m.KL, m.TokensPerSecond, m.Seconds, m.RolloutSeconds, m.UpdateSeconds, evalSummary(m.Eval))
}

// grpoSteps are turn-wise GRPO's steps (Run): each samples trajectories,
// rolls out G chains of the guard over each with the current weights,
// scores every turn and takes a GRPO update on the guard's own calls.
type grpoSteps struct {
	r        *run
	refCtx   *mlctx.Context // π_ref (nil when beta = 0)
	rollouts *jsonlFile     // rollouts.jsonl (with train.log_rollouts)
	tokens   *jsonlFile     // tokens.jsonl (with train.log_tokens)

	// With rollouts on a server (run.remote): the prefix of the adapters'
	// names, the training step whose adapter the server serves (−1: none
	// yet) and its name.
	servePrefix string
	served      int
	servedName  string
}

// prepare builds π_ref, the frozen starting model (rebuilt from model.path
// / model.seed on resume; with a LoRA adapter, the frozen base itself
// through model.WithoutAdapter: no copy), when β > 0, and opens
// rollouts.jsonl with train.log_rollouts (continuing after the resumed
// step).
func (g *grpoSteps) prepare(r *run, resumeDir string, start int) error {
	g.r = r
	g.served, g.servePrefix = -1, fmt.Sprintf("mageguard-%x", time.Now().UnixNano())
	o := r.opts
	var err error
	if o.GRPO.Beta > 0 && r.model.Adapter() != nil {
		g.refCtx = model.WithoutAdapter(r.model.Context())
	} else if o.GRPO.Beta > 0 {
		ref := r.model
		if resumeDir != "" {
			if ref, err = o.Model.LoadModel(r.backend, r.tok); err != nil {
				return fmt.Errorf("reference model: %w", err)
			}
		}
		if g.refCtx, err = grpo.FrozenCopy(ref.Context()); err != nil {
			return err
		}
	}
	if o.Train.LogRollouts {
		if g.rollouts, err = openJSONL(filepath.Join(o.Out, "rollouts.jsonl"), start); err != nil {
			return err
		}
	}
	if o.Train.LogTokens {
		if g.tokens, err = openJSONL(filepath.Join(o.Out, "tokens.jsonl"), start); err != nil {
			return err
		}
	}
	return nil
}

func (g *grpoSteps) close() {
	if g.rollouts != nil {
		g.rollouts.close()
	}
	if g.tokens != nil {
		g.tokens.close()
	}
}

// step runs one training step: sample, roll out, score, update.
func (g *grpoSteps) step(ctx context.Context, step int) (record, error) {
	r := g.r
	t0 := time.Now()
	if r.remote != nil && g.served != step-1 { // the first step of this process
		if err := g.serve(ctx, step-1); err != nil {
			return nil, err
		}
	}
	episodes, chains, rstats, draws, kept, err := g.draw(ctx, step)
	if err != nil {
		return nil, err
	}
	tRollout := time.Since(t0)
	m := &Metrics{Step: step, GeneratedTokens: rstats.NewTokens, PromptTokens: rstats.PromptTokens,
		ElidedObservations: rstats.ElidedObs, ElidedTokens: rstats.ElidedTokens,
		ElidedArguments: rstats.ElidedArguments, ElidedActions: rstats.ElidedActions, ElidedActionTokens: rstats.ElidedActionTokens,
		ElidedUserMessages: rstats.ElidedUsers, ElidedUserTokens: rstats.ElidedUserTokens}
	if r.opts.GRPO.DynamicSamplingOn() {
		m.DynamicDraws, m.DynamicKept = &draws, &kept
	}
	m.ServedAdapter = g.servedName
	seqs, origins, rows, err := g.score(step, episodes, chains, m)
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	if err := g.update(step, seqs, origins, m); err != nil {
		return nil, err
	}
	if r.remote != nil {
		if err := g.serve(ctx, step); err != nil {
			return nil, err
		}
	}
	m.UpdateSeconds = time.Since(t1).Seconds()
	m.RolloutSeconds = tRollout.Seconds()
	m.Seconds = time.Since(t0).Seconds()
	m.Elapsed = time.Since(r.started).Seconds()
	m.TokensPerSecond = float64(m.PromptTokens+m.GeneratedTokens+m.CompletionTokens) / m.Seconds
	for _, row := range rows {
		if err := g.rollouts.write(row); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// draw samples the step's trajectories and rolls them out. Without dynamic
// sampling that is one draw of train.trajectories. With it (grpo.dynamic_sampling,
// or loss dapo), the trajectories whose trained sequences all have
// advantage 0 are left out and more are drawn, train.trajectories at a
// time from the trajectories not kept yet (each is kept once a step), until
// train.trajectories (at most the pool's size) with a non-zero advantage are
// kept (the first ones) or grpo.dynamic_sampling_draws extra draws are spent
// (said in the log); when none is kept, the step trains on the first draw,
// as without dynamic sampling. Every draw depends only on (train.seed, step,
// draw) and the trajectories kept before it, so a resumed run draws what an
// uninterrupted one would. It
// returns the episodes with their chains (G per episode, in order), the
// rollouts' stats over all draws, the draws taken and the trajectories
// kept.
func (g *grpoSteps) draw(ctx context.Context, step int) ([]*rollout.Episode, []*rollout.Chain, rollout.Stats, int, int, error) {
	r := g.r
	o := r.opts
	N, G := min(o.Train.Trajectories, len(r.positive)), o.Rollout.GroupSize
	var stats rollout.Stats
	var firstEps, keptEps []*rollout.Episode
	var firstChains, keptChains []*rollout.Chain
	kept := make([]bool, len(r.positive)) // by pool index
	draws := 0
	for d := 0; d == 0 || (o.GRPO.DynamicSamplingOn() && len(keptEps) < N && d <= o.GRPO.DynamicSamplingDraws); d++ {
		idx := r.sample(step)
		if d > 0 {
			// Draw from the trajectories not kept yet, in pool order.
			var avail []int
			var positive []bool
			for i, k := range kept {
				if !k {
					avail, positive = append(avail, i), append(positive, r.positive[i])
				}
			}
			idx = SampleStep(positive, N, o.Train.Balance, seed.Mix(o.Train.Seed, uint64(d)), step)
			for j, i := range idx {
				idx[j] = avail[i]
			}
		}
		episodes := r.episodes(idx)
		chains, rstats, err := g.rollOut(episodes, step, d)
		if err != nil {
			return nil, nil, stats, 0, 0, fmt.Errorf("step %d: rollout: %w", step, err)
		}
		if ctx.Err() != nil {
			return nil, nil, stats, 0, 0, ctx.Err()
		}
		stats.Add(rstats)
		draws++
		if d == 0 {
			firstEps, firstChains = episodes, chains
		}
		if !o.GRPO.DynamicSamplingOn() {
			return episodes, chains, stats, draws, 0, nil
		}
		for e, ep := range episodes {
			group := chains[e*G : (e+1)*G]
			nonzero, err := g.hasAdvantage(ep, group)
			if err != nil {
				return nil, nil, stats, 0, 0, fmt.Errorf("step %d: trajectory %s: %w", step, ep.Traj.ID, err)
			}
			if nonzero && len(keptEps) < N {
				keptEps, keptChains = append(keptEps, ep), append(keptChains, group...)
				kept[idx[e]] = true
			}
		}
	}
	if len(keptEps) < N {
		fmt.Fprintf(r.log, "step %d: dynamic sampling kept %d of %d trajectories with a non-zero advantage after %d extra draws (grpo.dynamic_sampling_draws spent)\n",
			step, len(keptEps), N, draws-1)
	}
	if len(keptEps) == 0 {
		return firstEps, firstChains, stats, draws, 0, nil
	}
	return keptEps, keptChains, stats, draws, len(keptEps), nil
}

// hasAdvantage reports whether a trajectory's group gives a sequence that
// is trained on (the memory calls' alone with train.memory_only) a
// non-zero advantage.
func (g *grpoSteps) hasAdvantage(ep *rollout.Episode, group []*rollout.Chain) (bool, error) {
	o := g.r.opts
	sc, err := scoreGroup(o.Rewards, o.GRPO.ScaleRewards, ep, group)
	if err != nil {
		return false, err
	}
	seqs := groupSequences(group, sc)
	if o.Train.MemoryOnly {
		seqs = memoryCalls(seqs)
	}
	for _, s := range seqs {
		if s.Advantage != 0 {
			return true, nil
		}
	}
	return false, nil
}

// rollOut runs G chains (rollout.group_size) of the guard over each
// episode with the current policy, sampling with the rollout section's
// settings from (train.seed, step), and for dynamic sampling's extra draws
// from (train.seed, step, draw).
func (g *grpoSteps) rollOut(episodes []*rollout.Episode, step, draw int) ([]*rollout.Chain, rollout.Stats, error) {
	o := g.r.opts
	s := seed.Mix(o.Train.Seed, uint64(step))
	if draw > 0 {
		s = seed.Mix(s, uint64(draw))
	}
	return g.r.guard.Run(episodes, rollout.RunOptions{Chains: o.Rollout.GroupSize, Sampling: generate.Sampling{
		Temperature: o.Rollout.Temperature, TopK: o.Rollout.TopK, TopP: o.Rollout.TopP,
		Seed: s,
	}})
}

// score computes the rewards and advantages per trajectory (its G chains
// are the group at each turn) and returns one sequence per memory and
// judge call, with the step's rollouts.jsonl rows when they are logged; it
// fills m's rollout means. origins[i] says where seqs[i] comes from.
func (g *grpoSteps) score(step int, episodes []*rollout.Episode, chains []*rollout.Chain, m *Metrics) ([]grpo.Sequence, []seqOrigin, []rolloutRow, error) {
	o := g.r.opts
	G := o.Rollout.GroupSize
	var seqs []grpo.Sequence
	var origins []seqOrigin
	var rows []rolloutRow
	var nTurns, nMem int
	for e, ep := range episodes {
		group := chains[e*G : (e+1)*G]
		sc, err := scoreGroup(o.Rewards, o.GRPO.ScaleRewards, ep, group)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("step %d: trajectory %s: %w", step, ep.Traj.ID, err)
		}
		gs, gOrigins := groupSequences(group, sc), groupOrigins(ep, group)
		if o.Train.MemoryOnly {
			gs, gOrigins = memoryCalls(gs), memoryOrigins(gOrigins)
		}
		seqs, origins = append(seqs, gs...), append(origins, gOrigins...)
		for c, ch := range group {
			for t := range ch.Turns {
				tu := &ch.Turns[t]
				nTurns++
				m.RewardJudge += sc.rewards.Judge[t][c]
				m.AccuracyJudge += sc.rewards.Correct[t][c]
				m.AccuracyMemory += sc.rewards.Discounted[t][c]
				m.MemoryChars += float64(tu.MemoryChars())
				if tu.Decision == prompt.DecisionReject {
					m.RejectRate++
				}
				if !tu.Judge.Parsed {
					m.JudgeViolationRate++
				}
				if tu.Memory != nil {
					nMem++
					m.RewardMemory += sc.rewards.Memory[t][c]
					if !tu.Memory.Parsed {
						m.MemoryViolationRate++
					}
				}
				if g.rollouts != nil {
					rows = append(rows, newRolloutRow(step, ep, ch, t, sc, o.Train.LogTexts))
				}
			}
		}
	}
	m.RewardJudge /= float64(nTurns)
	m.AccuracyJudge /= float64(nTurns)
	m.AccuracyMemory /= float64(nTurns)
	m.MemoryChars /= float64(nTurns)
	m.RejectRate /= float64(nTurns)
	m.JudgeViolationRate /= float64(nTurns)
	if nMem > 0 {
		m.RewardMemory /= float64(nMem)
		m.MemoryViolationRate /= float64(nMem)
	}
	for _, s := range seqs {
		if s.Advantage != 0 {
			m.NonzeroAdvantages++
		}
	}
	m.NonzeroAdvantages /= float64(len(seqs))
	return seqs, origins, rows, nil
}

// update takes the GRPO update on seqs and records its diagnostics in m.
// Forced tokens (structured decoding) carry no choice and are left out of
// the loss.
func (g *grpoSteps) update(step int, seqs []grpo.Sequence, origins []seqOrigin, m *Metrics) error {
	r := g.r
	if len(origins) != len(seqs) {
		return fmt.Errorf("step %d: %d sequences but %d origins", step, len(seqs), len(origins))
	}
	order := batchOrder(seqs)
	sorted, sortedOrigins := make([]grpo.Sequence, len(seqs)), make([]seqOrigin, len(seqs))
	for i, j := range order {
		sorted[i], sortedOrigins[i] = seqs[j], origins[j]
		if origins[j].phase != seqs[j].Phase {
			return fmt.Errorf("step %d: sequence %d is a %s call but its origin a %s one", step, j, seqs[j].Phase, origins[j].phase)
		}
	}
	seqs, origins = sorted, sortedOrigins
	batch, err := grpo.NewBatch(seqs)
	if err != nil {
		return fmt.Errorf("step %d: %w", step, err)
	}
	if g.refCtx != nil {
		if batch.RefLogProbs, err = r.trainer.LogProbs(g.refCtx, batch); err != nil {
			return fmt.Errorf("step %d: reference log-probs: %w", step, err)
		}
	}
	if r.opts.OnBatch != nil {
		r.opts.OnBatch(step, batch)
	}
	r.trainer.SetRecordTokens(g.tokens != nil)
	stats, err := r.trainer.Update(batch)
	if err != nil {
		return fmt.Errorf("step %d: %w", step, err)
	}
	if g.tokens != nil {
		for it, st := range stats {
			for _, rec := range tokenRecords(step, it+1, seqs, origins, batch, st.Terms) {
				if err := g.tokens.write(rec); err != nil {
					return err
				}
			}
		}
	}
	last := stats[len(stats)-1]
	m.Loss, m.GradNorm, m.KL, m.ClipFraction = last.Loss, last.GradNorm, last.MeanKL, last.ClipFrac
	m.Ratio, m.Entropy, m.LR = last.MeanRatio, last.Entropy, last.LR
	m.Sequences, m.CompletionTokens = last.Sequences, last.Tokens
	if r.opts.GRPO.Corrects() {
		m.RolloutWeightMean, m.RolloutWeightMax = &last.RolloutWeightMean, &last.RolloutWeightMax
		m.RolloutMasked, m.RolloutKL = &last.RolloutMasked, &last.RolloutKL
	}
	return nil
}

// groupSequences returns one GRPO sequence per memory and judge call of a
// trajectory's chains, each carrying its own phase's advantage at its turn
// and chain (the phase mask), and the calls' forced-token flags.
func groupSequences(group []*rollout.Chain, sc *scored) []grpo.Sequence {
	var seqs []grpo.Sequence
	for c, ch := range group {
		for t := range ch.Turns {
			tu := &ch.Turns[t]
			if tu.Memory != nil {
				seqs = append(seqs, sequence(tu.Memory, grpo.PhaseMemory, sc.advMemory[t][c], sc.rewards.Memory[t][c]))
			}
			seqs = append(seqs, sequence(&tu.Judge, grpo.PhaseJudge, sc.advJudge[t][c], sc.rewards.Judge[t][c]))
		}
	}
	return seqs
}

// seqOrigin says where a trained sequence comes from: its trajectory, turn
// (numbered in the trajectory), chain and phase.
type seqOrigin struct {
	trajectoryID string
	turn, chain  int
	phase        grpo.Phase
}

// groupOrigins returns the origins of groupSequences' sequences, in its
// order.
func groupOrigins(ep *rollout.Episode, group []*rollout.Chain) []seqOrigin {
	var out []seqOrigin
	for _, ch := range group {
		for t := range ch.Turns {
			tu := &ch.Turns[t]
			o := seqOrigin{trajectoryID: ep.Traj.ID, turn: tu.Index, chain: ch.Index, phase: grpo.PhaseMemory}
			if tu.Memory != nil {
				out = append(out, o)
			}
			o.phase = grpo.PhaseJudge
			out = append(out, o)
		}
	}
	return out
}

// memoryOrigins returns the memory calls' origins, in order (memoryCalls'
// sequences').
func memoryOrigins(origins []seqOrigin) []seqOrigin {
	var out []seqOrigin
	for _, o := range origins {
		if o.phase == grpo.PhaseMemory {
			out = append(out, o)
		}
	}
	return out
}

// memoryCalls returns the memory calls' sequences of seqs, in order
// (train.memory_only).
func memoryCalls(seqs []grpo.Sequence) []grpo.Sequence {
	var out []grpo.Sequence
	for _, s := range seqs {
		if s.Phase == grpo.PhaseMemory {
			out = append(out, s)
		}
	}
	return out
}

// sequence turns a guard call into a GRPO sequence with its phase's advantage
// and the sampler's log-probs, when the generator gave one per token.
func sequence(c *rollout.Call, phase grpo.Phase, adv, reward float64) grpo.Sequence {
	s := newSequence(c.Prompt, c.Completion, c.Forced, phase, float32(adv), float32(reward))
	if len(c.LogProbs) == len(c.Completion) {
		s.LogProbs = c.LogProbs
	}
	return s
}

// scored is one trajectory's group after scoring: rewards (with their
// terms) and advantages, all [turn][chain].
type scored struct {
	rewards             rewards.Rewards
	advMemory, advJudge [][]float64
}

// scoreGroup computes the rewards of one trajectory's G chains
// (docs/design.md#rewards) and their per-turn, per-phase group advantages
// (docs/design.md#turn-wise-grpo).
func scoreGroup(cfg rewards.Config, scale string, ep *rollout.Episode, group []*rollout.Chain) (*scored, error) {
	T, G := ep.End-ep.Start, len(group)
	labels := make([]int, T)
	outcomes := make([][]rewards.Outcome, T)
	for t := range T {
		labels[t] = ep.Traj.Turns[ep.Start+t].Label
		outcomes[t] = make([]rewards.Outcome, G)
		for c, ch := range group {
			tu := &ch.Turns[t]
			outcomes[t][c] = rewards.Outcome{
				// Judge-only has no memory call: its memory terms are unused.
				MemoryParsed: tu.Memory == nil || tu.Memory.Parsed,
				MemoryChars:  tu.MemoryChars(),
				JudgeParsed:  tu.Judge.Parsed,
				Reject:       tu.Decision == prompt.DecisionReject,
			}
		}
	}
	rw, err := rewards.Compute(cfg, labels, outcomes)
	if err != nil {
		return nil, err
	}
	advM, advJ, err := grpo.PhaseAdvantages(rw, scale)
	if err != nil {
		return nil, err
	}
	return &scored{rewards: rw, advMemory: advM, advJudge: advJ}, nil
}

// rolloutRow is one line of rollouts.jsonl: one step × trajectory × turn ×
// chain. Turns are numbered from 0 in the trajectory; decision is the
// effective one (after the format fallback); memory_tokens and judge_tokens
// are the calls' generated tokens.
type rolloutRow struct {
	Step            int     `json:"step"`
	TrajectoryID    string  `json:"trajectory_id"`
	Turn            int     `json:"turn"`
	Chain           int     `json:"chain"`
	Label           int     `json:"label"`
	MemoryChars     int     `json:"memory_chars"`
	MemoryParsed    bool    `json:"memory_parsed"`
	JudgeParsed     bool    `json:"judge_parsed"`
	Decision        string  `json:"decision"`
	RewardJudge     float64 `json:"reward_judge"`
	RewardMemory    float64 `json:"reward_memory"`
	AdvantageJudge  float64 `json:"advantage_judge"`
	AdvantageMemory float64 `json:"advantage_memory"`
	MemoryTokens    int     `json:"memory_tokens"`
	JudgeTokens     int     `json:"judge_tokens"`
	MemoryText      *string `json:"memory_text,omitempty"`
	JudgeText       *string `json:"judge_text,omitempty"`
}

func newRolloutRow(step int, ep *rollout.Episode, ch *rollout.Chain, t int, sc *scored, texts bool) rolloutRow {
	tu := &ch.Turns[t]
	row := rolloutRow{
		Step: step, TrajectoryID: ep.Traj.ID, Turn: tu.Index, Chain: ch.Index, Label: tu.Label,
		MemoryChars: tu.MemoryChars(), MemoryParsed: tu.Memory == nil || tu.Memory.Parsed,
		JudgeParsed: tu.Judge.Parsed, Decision: tu.Decision,
		RewardJudge: sc.rewards.Judge[t][ch.Index], RewardMemory: sc.rewards.Memory[t][ch.Index],
		AdvantageJudge: sc.advJudge[t][ch.Index], AdvantageMemory: sc.advMemory[t][ch.Index],
		JudgeTokens: len(tu.Judge.Completion),
	}
	if tu.Memory != nil {
		row.MemoryTokens = len(tu.Memory.Completion)
	}
	if texts {
		jt := tu.Judge.Text
		row.JudgeText = &jt
		if tu.Memory != nil {
			mt := tu.Memory.Text
			row.MemoryText = &mt
		}
	}
	return row
}

// tokenRecord is one line of tokens.jsonl: one trained sequence at one
// optimizer iteration of a step. The per-token arrays have one entry per
// completion token; entries whose mask is 0 (tokens the grammar forced)
// hold 0. The step's loss in metrics.jsonl (its last iteration's) is
// Σ weight · Σ_k mask · loss_term over the records of that step and
// iteration.
type tokenRecord struct {
	Step         int       `json:"step"`
	Iteration    int       `json:"iteration"` // 1 … grpo.num_iterations
	Role         string    `json:"role"`      // memory | judge
	TrajectoryID string    `json:"trajectory_id"`
	Turn         int       `json:"turn"`
	Chain        int       `json:"chain"`
	Advantage    float32   `json:"advantage"`
	Weight       float64   `json:"weight"` // the sequence's aggregation weight: 1/(N_seq·max(1, Σ_k m)) or 1/N_tok
	Mask         []int     `json:"mask"`
	LogP         []float32 `json:"logp"`         // log π_θ at this iteration, before its update
	LogPOld      []float32 `json:"logp_old"`     // log π_old (the rollout's weights)
	LogPRollout  []float32 `json:"logp_rollout"` // the sampler's, recorded at generation; null when the generator gave none
	LogPRef      []float32 `json:"logp_ref"`     // null without a reference (β = 0)
	LossTerm     []float32 `json:"loss_term"`    // ℓ_k before aggregation
}

// tokenRecords returns the tokens.jsonl records of one iteration: seqs in
// batch order, origins theirs, terms the iteration's (grpo.Stats.Terms).
func tokenRecords(step, iteration int, seqs []grpo.Sequence, origins []seqOrigin, b *grpo.Batch, terms *grpo.TokenTerms) []tokenRecord {
	recs := make([]tokenRecord, len(seqs))
	for i, s := range seqs {
		n := len(s.Completion)
		rec := tokenRecord{
			Step: step, Iteration: iteration, Role: s.Phase.String(),
			TrajectoryID: origins[i].trajectoryID, Turn: origins[i].turn, Chain: origins[i].chain,
			Advantage: s.Advantage, Weight: terms.Weight[i],
			Mask: make([]int, n), LogP: make([]float32, n), LogPOld: make([]float32, n), LossTerm: make([]float32, n),
		}
		if b.RolloutLogProbs != nil {
			rec.LogPRollout = make([]float32, n)
		}
		if b.RefLogProbs != nil {
			rec.LogPRef = make([]float32, n)
		}
		j := 0 // the token's column in the batch: the counted tokens, in order
		for k := range n {
			if k < len(s.Forced) && s.Forced[k] {
				continue
			}
			rec.Mask[k] = 1
			rec.LogP[k], rec.LossTerm[k] = terms.LogP[i][j], terms.LossTerm[i][j]
			rec.LogPOld[k] = terms.LogP[i][j] // μ = 1: π_old is the policy of this iteration
			if b.OldLogProbs != nil {
				rec.LogPOld[k] = b.OldLogProbs[i][j]
			}
			if rec.LogPRollout != nil {
				rec.LogPRollout[k] = b.RolloutLogProbs[i][j]
			}
			if rec.LogPRef != nil {
				rec.LogPRef[k] = b.RefLogProbs[i][j]
			}
			j++
		}
		recs[i] = rec
	}
	return recs
}

// serve writes the adapter as it is after training step step into
// Out/served/step-STEP, has the server load it under a new name, names it
// in the next requests, and unloads and removes the one it replaces: the
// rollouts of step+1 (and an eval after step) run on the weights the
// trainer holds.
func (g *grpoSteps) serve(ctx context.Context, step int) error {
	r := g.r
	dir, err := filepath.Abs(filepath.Join(r.opts.Out, "served", fmt.Sprintf("step-%d", step)))
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := r.saveModel(dir); err != nil {
		return fmt.Errorf("step %d: served adapter: %w", step, err)
	}
	name := fmt.Sprintf("%s-step-%d", g.servePrefix, step)
	if err := r.remote.LoadLoRA(ctx, name, dir); err != nil {
		return fmt.Errorf("step %d: %w", step, err)
	}
	r.remote.SetModel(name)
	prevName, prevStep := g.servedName, g.served
	g.served, g.servedName = step, name
	if prevName != "" {
		if err := r.remote.UnloadLoRA(ctx, prevName); err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if err := os.RemoveAll(filepath.Join(r.opts.Out, "served", fmt.Sprintf("step-%d", prevStep))); err != nil {
			return err
		}
	}
	return nil
}
