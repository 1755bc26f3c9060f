package train

// The supervised warm start: cross-entropy on the completion tokens a
// teacher writes, through the GRPO trainer.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/prompt"
	"github.com/mageguard/mageguard/train/teacher"
)

// SFTConfig is the `sft` section: the supervised warm start's own keys.
// Everything else `mageguard sft` shares with `train` (steps, trajectories
// per step, balance, windows, seeds, checkpoints, evals) and with grpo's
// optimizer keys (learning rate, schedule, warm-up, AdamW, clipping,
// micro-batches, loss aggregation).
type SFTConfig struct {
	// Teacher names the targets: "synth" (the synthetic world's perfect
	// memory manager and judge), "synth-myopic" (its memory of the latest
	// turn only, with the judge's rule on it), "synth-leaky" or
	// "synth-leaky:P" (a memory that keeps each earlier identifier with
	// probability P at every turn, 0.5 by default, with the judge's rule on
	// it), or a teacher JSONL file (teacher.File; a file named synth needs a
	// path such as ./synth).
	Teacher string `yaml:"teacher"`
	// JudgePairs adds to every step, besides the calls of its
	// trajectories, the judge calls of that many pairs of turns: the
	// label-1 turn and a label-0 turn of an attack run with a label-1
	// action (a fresh draw each step, the runs distinct while the pool
	// lasts). The label-0 turn is drawn among those after the label-1 turn
	// when there are any: their memory holds the injection too, so the
	// pair differs only in whether the action is its target — the judge's
	// hard case, where "an injection was seen" is not enough. Label-1
	// actions are rare (7.5% of synth's), so without pairs a step of a few
	// trajectories shows the judge about one action to reject; 0 = none.
	JudgePairs int `yaml:"judge_pairs"`
	// MemoryChanges adds to every step that many memory calls (a fresh
	// draw each step, distinct while the pool lasts) among those whose
	// target changes the memory: the target differs from the previous
	// memory (at a window's first turn, from the empty one); for the leaky
	// synth teacher, the target adds an identifier (its drops alone are
	// the leak's coin flips: drawing them would teach it to drop more). Most memory
	// calls copy the memory unchanged; the few that add an identifier —
	// the prompt's, a document's, an injected instruction's — are what a
	// memory manager must learn to write, and an injection's is one call of
	// a run. 0 = none.
	MemoryChanges int `yaml:"memory_changes"`
	// OwnMemories trains the calls of each step's trajectories on the
	// memories the model writes itself (DAgger-style): the step first runs
	// the guard loop greedily with the current weights; each memory call's
	// prompt shows the model's own previous memory and its target is what
	// the teacher would write from it (teacher.Corrector.Next), each judge
	// call's prompt shows the memory the model wrote and its target is the
	// teacher's call on that memory (teacher.Corrector.JudgeOn). Teacher forcing
	// alone trains on the teacher's memories, which the model never reads
	// at eval. Needs a teacher that can correct (synth, synth-myopic,
	// synth-leaky); no
	// effect on the judge-only variant, which keeps no memory; the extra
	// judge pairs and memory changes stay the teacher's. Off by default.
	OwnMemories bool `yaml:"own_memories"`
}

// DefaultSFTConfig returns the defaults: the synthetic world's perfect teacher.
func DefaultSFTConfig() SFTConfig { return SFTConfig{Teacher: teacher.NameSynth} }

// Validate checks the values; errors start with the key's name.
func (c *SFTConfig) Validate() error {
	if c.Teacher == "" {
		return fmt.Errorf("teacher must be %s, %s, %s[:P] or a teacher file", teacher.NameSynth, teacher.NameSynthMyopic, teacher.NameSynthLeaky)
	}
	if c.JudgePairs < 0 {
		return fmt.Errorf("judge_pairs must be >= 0, got %d", c.JudgePairs)
	}
	if c.MemoryChanges < 0 {
		return fmt.Errorf("memory_changes must be >= 0, got %d", c.MemoryChanges)
	}
	return nil
}

// SFTMetrics is one line of an SFT run's metrics.jsonl: one step.
type SFTMetrics struct {
	Step             int            `json:"step"`
	Loss             float64        `json:"loss"`                       // cross-entropy: mean −log π of the counted completion tokens (nats per token)
	LossMemory       float64        `json:"loss_memory"`                // the same over the memory calls' tokens
	LossJudge        float64        `json:"loss_judge"`                 // the same over the judge calls' tokens
	OwnMemoryRight   *float64       `json:"own_memory_right,omitempty"` // with sft.own_memories: share of the model's memories that were the teacher's correction of the memory shown
	OwnJudgeRight    *float64       `json:"own_judge_right,omitempty"`  // with sft.own_memories: share of the model's decisions that were the teacher's on the memory it wrote
	GradNorm         float64        `json:"grad_norm"`                  // before clipping
	LR               float64        `json:"lr"`
	Sequences        int            `json:"sequences"`         // memory + judge calls trained on
	CompletionTokens int            `json:"completion_tokens"` // completion tokens counted in the loss
	PromptTokens     int            `json:"prompt_tokens"`     // prompt tokens of those calls
	TokensPerSecond  float64        `json:"tokens_per_s"`      // (prompt + completion tokens) / step seconds
	Seconds          float64        `json:"seconds"`
	Elapsed          float64        `json:"elapsed"`
	Eval             map[string]any `json:"eval,omitempty"`
}

func (m *SFTMetrics) setEval(ev map[string]any) { m.Eval = ev }
func (m *SFTMetrics) elapsed() float64          { return m.Elapsed }

func (m *SFTMetrics) summary() string {
	own := ""
	if m.OwnMemoryRight != nil && m.OwnJudgeRight != nil {
		own = fmt.Sprintf("; own memories right %.2f, decisions %.2f", *m.OwnMemoryRight, *m.OwnJudgeRight)
	}
	return fmt.Sprintf("cross-entropy %.4f (memory %.4f, judge %.4f%s)  grad %.3f  lr %.3g  %d seqs  %.0f tok/s  %.1fs%s",
		m.Loss, m.LossMemory, m.LossJudge, own, m.GradNorm, m.LR, m.Sequences, m.TokensPerSecond, m.Seconds, evalSummary(m.Eval))
}

// sftSteps are the supervised warm start's steps (SFT): each trains on
// the teacher's targets for the calls of its trajectories, rendered once
// when the run is prepared.
type sftSteps struct {
	r       *run
	teacher teacher.Teacher
	cfg     SFTConfig         // OwnMemories only where the variant keeps a memory (mage)
	seqs    [][]grpo.Sequence // per pool trajectory: its memory and judge calls, in turn order
	judge   [][]judgeCall     // per pool trajectory: its judge calls, in turn order
	changes []seqRef          // the memory calls whose target changes the memory
}

// seqRef is one sequence of a pool trajectory: sftSteps.seqs[traj][seq].
type seqRef struct{ traj, seq int }

// judgeCall is one turn's judge sequence and the turn's label.
type judgeCall struct {
	seq   int // index into the trajectory's seqs
	label int
}

// SFT runs a supervised warm start (`mageguard sft`): each step samples
// Train.Trajectories trajectories as train does (balanced with
// Train.Balance, cut to Train.MaxTurns windows), and trains the model on
// the teacher's targets for every turn of each: the memory call
// (prompt: the previous target memory and the turn's events) with the
// target memory as its update_memory completion, and the judge call
// (prompt: the target memory and the pending action) with the target's
// assess_risk completion, each a sequence of its own, as in GRPO. Prompts
// are the guard loop's (rollout.EpisodeCalls) and completions the calls as
// the model should generate them (rollout.Guard.Completion); the loss
// covers completion tokens only, each sequence its own role's (with
// structured decoding, the tokens the grammar forces carry none, as in
// GRPO). Checkpoints, metrics.jsonl, curves.png, resume, Ctrl-C and the
// periodic eval are train's.
//
// Trajectories the teacher has no targets for are left out (and counted);
// opts.GRPO's beta, num_iterations, clip_epsilon, clip_epsilon_high,
// scale_rewards, loss and rollout_correction do not apply.
func SFT(ctx context.Context, opts Options, cfg SFTConfig, tch teacher.Teacher) (*Result, error) {
	if tch == nil {
		return nil, errors.New("sft: no teacher")
	}
	if opts.Rollout.Generator != rollout.GeneratorLocal {
		// Only GRPO loads its adapter into a server after every step.
		return nil, fmt.Errorf("sft: rollout.generator is %q: sft needs the local model, set rollout.generator: %s", opts.Rollout.Generator, rollout.GeneratorLocal)
	}
	// The cross-entropy through the GRPO trainer. With advantage 1 for
	// every sequence, no old log-probs (ρ = exp(log π − sg(log π)) = 1, so
	// the clip is inactive), one iteration and β = 0, the GRPO loss
	// −mean_seq mean_tok ρ·A has the gradient −mean_seq mean_tok ∇log π:
	// exactly the gradient of the mean cross-entropy of the completion
	// tokens. Its value is −1; the cross-entropy itself is reported from
	// the trainer's −log π diagnostics (grpo.Stats.Entropy).
	opts.GRPO.Beta = 0
	opts.GRPO.NumIterations = 1
	opts.GRPO.Loss, opts.GRPO.RolloutCorrection = grpo.LossGRPO, grpo.CorrectionNone
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sft.%w", err)
	}
	if _, ok := tch.(teacher.Corrector); cfg.OwnMemories && !ok {
		return nil, fmt.Errorf("sft.own_memories: teacher %s cannot say what a model should write from its own memories (%s, %s and %s can)", tch, teacher.NameSynth, teacher.NameSynthMyopic, teacher.NameSynthLeaky)
	}
	cfg.OwnMemories = cfg.OwnMemories && opts.Rollout.Variant == "mage"
	return (&run{opts: opts, steps: &sftSteps{teacher: tch, cfg: cfg}}).loop(ctx)
}

// prepare renders the targets of every pool trajectory as sequences and
// drops the trajectories the teacher has nothing for from the pool.
func (sft *sftSteps) prepare(r *run, _ string, _ int) error {
	sft.r = r
	o := r.opts
	var pool []*dataset.Trajectory
	var positive []bool
	var stats rollout.Stats
	skipped := 0
	for i, tr := range r.pool {
		seqs, changes, err := sft.sequences(tr, &stats)
		if errors.Is(err, teacher.ErrNotTaught) {
			skipped++
			continue
		}
		if err != nil {
			return fmt.Errorf("sft: %w", err)
		}
		var judge []judgeCall
		for k, s := range seqs {
			if s.Phase == grpo.PhaseJudge {
				judge = append(judge, judgeCall{seq: k})
			}
		}
		s, _ := r.window(tr)
		for t := range judge {
			judge[t].label = tr.Turns[s+t].Label
		}
		for _, k := range changes {
			sft.changes = append(sft.changes, seqRef{traj: len(pool), seq: k})
		}
		pool = append(pool, tr)
		positive = append(positive, r.positive[i])
		sft.seqs = append(sft.seqs, seqs)
		sft.judge = append(sft.judge, judge)
	}
	if len(pool) == 0 {
		return fmt.Errorf("sft: teacher %s has targets for none of the %d trajectories of %s", sft.teacher, len(r.pool), o.Train.Data)
	}
	if ft, ok := sft.teacher.(*teacher.File); ok {
		ids := map[string]bool{}
		for _, tr := range r.pool {
			ids[tr.ID] = true
		}
		if unused := ft.Unused(ids); len(unused) > 0 {
			return fmt.Errorf("sft: teacher %s: trajectory_id %q (and %d more) is not a trajectory with actions of %s", ft, unused[0], len(unused)-1, o.Train.Data)
		}
	}
	n := 0
	for _, s := range sft.seqs {
		n += len(s)
	}
	fmt.Fprintf(r.log, "sft: teacher %s: %d trajectories (%d left out without targets), %d calls; %d observations elided\n",
		sft.teacher, len(pool), skipped, n, stats.ElidedObs)
	r.pool, r.positive = pool, positive
	return nil
}

// isChange reports whether a memory call whose target is next, after the
// target prev, is one sft.memory_changes draws from: a target that differs
// from the previous one, or, for a teacher that says which calls add to
// the memory (teacher.Synth: a leaky memory's drops are not changes), one
// that adds.
func isChange(t teacher.Teacher, prev, next string) bool {
	if a, ok := t.(interface{ Adds(prev, next string) bool }); ok {
		return a.Adds(prev, next)
	}
	return next != prev
}

// sequences returns the memory and judge sequences of tr's window, and
// the indices among them of the memory calls whose target changes the
// memory (SFTConfig.MemoryChanges).
func (sft *sftSteps) sequences(tr *dataset.Trajectory, stats *rollout.Stats) (seqs []grpo.Sequence, changes []int, err error) {
	s, e := sft.r.window(tr)
	targets, err := sft.teacher.Targets(tr, s, e)
	if err != nil {
		return nil, nil, err
	}
	if len(targets) != e-s {
		return nil, nil, fmt.Errorf("teacher %s: %d targets for the %d turns of trajectory %s", sft.teacher, len(targets), e-s, tr.ID)
	}
	calls := sft.r.guard.EpisodeCalls(&rollout.Episode{Traj: tr, Start: s, End: e}, stats)
	prev := ""
	for t, tg := range targets {
		where := fmt.Sprintf("trajectory %s turn %d", tr.ID, s+t)
		if tg.Where != "" {
			where = "teacher " + tg.Where + ": " + where
		}
		if c := calls.Memory(t, prev); c != nil {
			toks, forced, err := sft.r.guard.Completion(rollout.MemoryRole, prompt.ToolCall{Name: prompt.MemoryToolName, Content: tg.Memory})
			if err != nil {
				return nil, nil, fmt.Errorf("%s: memory: %w", where, err)
			}
			if isChange(sft.teacher, prev, tg.Memory) {
				changes = append(changes, len(seqs))
			}
			seqs = append(seqs, teacherSequence(c.Prompt, toks, forced, grpo.PhaseMemory))
		}
		c := calls.Judge(t, tg.Memory)
		toks, forced, err := sft.r.guard.Completion(rollout.JudgeRole, prompt.ToolCall{Name: prompt.JudgeToolName, Decision: tg.Decision, Rationale: tg.Rationale})
		if err != nil {
			return nil, nil, fmt.Errorf("%s: decision/rationale: %w", where, err)
		}
		seqs = append(seqs, teacherSequence(c.Prompt, toks, forced, grpo.PhaseJudge))
		prev = tg.Memory
	}
	return seqs, changes, nil
}

// step runs one SFT step: sample trajectories, one optimizer step on all
// their calls.
func (sft *sftSteps) step(ctx context.Context, step int) (record, error) {
	r := sft.r
	t0 := time.Now()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	m := &SFTMetrics{Step: step}
	var seqs []grpo.Sequence
	idx := r.sample(step)
	if sft.cfg.OwnMemories {
		own, memRight, judgeRight, err := sft.ownSequences(idx, step)
		if err != nil {
			return nil, fmt.Errorf("step %d: own memories: %w", step, err)
		}
		seqs = append(seqs, own...)
		m.OwnMemoryRight, m.OwnJudgeRight = &memRight, &judgeRight
	} else {
		for _, i := range idx {
			seqs = append(seqs, sft.seqs[i]...)
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	seqs = append(seqs, sft.judgePairs(step, sft.cfg.JudgePairs)...)
	seqs = append(seqs, sft.memoryChanges(step, sft.cfg.MemoryChanges)...)
	sortForBatch(seqs) // as in GRPO
	for _, s := range seqs {
		m.PromptTokens += len(s.Prompt)
	}
	batch, err := grpo.NewBatch(seqs)
	if err != nil {
		return nil, fmt.Errorf("step %d: %w", step, err)
	}
	stats, err := r.trainer.Update(batch)
	if err != nil {
		return nil, fmt.Errorf("step %d: %w", step, err)
	}
	last := stats[len(stats)-1]
	mem, judge := last.Phase[grpo.PhaseMemory], last.Phase[grpo.PhaseJudge]
	m.GradNorm, m.LR = last.GradNorm, last.LR
	m.LossMemory, m.LossJudge = mem.Entropy, judge.Entropy
	m.Loss = (mem.Entropy*float64(mem.Tokens) + judge.Entropy*float64(judge.Tokens)) / float64(mem.Tokens+judge.Tokens)
	m.Sequences, m.CompletionTokens = last.Sequences, mem.Tokens+judge.Tokens
	m.Seconds = time.Since(t0).Seconds()
	m.Elapsed = time.Since(r.started).Seconds()
	m.TokensPerSecond = float64(m.PromptTokens+m.CompletionTokens) / m.Seconds
	return m, nil
}

func (sft *sftSteps) close() {}
