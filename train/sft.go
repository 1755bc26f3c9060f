package train

// The supervised warm start: cross-entropy on the completion tokens a
// teacher writes, through the GRPO trainer.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/internal/seed"
	"github.com/mageguard/mageguard/rollout"
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
	// it), or a teacher JSONL file (FileTeacher; a file named synth needs a
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
	// the teacher would write from it (Corrector.NextMemory), each judge
	// call's prompt shows the memory the model wrote and its target is the
	// teacher's call on that memory (Corrector.JudgeOn). Teacher forcing
	// alone trains on the teacher's memories, which the model never reads
	// at eval. Needs a teacher that can correct (synth, synth-myopic,
	// synth-leaky); no
	// effect on the judge-only variant, which keeps no memory; the extra
	// judge pairs and memory changes stay the teacher's. Off by default.
	OwnMemories bool `yaml:"own_memories"`
}

// DefaultSFTConfig returns the defaults: the synthetic world's perfect teacher.
func DefaultSFTConfig() SFTConfig { return SFTConfig{Teacher: TeacherSynth} }

// Validate checks the values; errors start with the key's name.
func (c *SFTConfig) Validate() error {
	if c.Teacher == "" {
		return fmt.Errorf("teacher must be %s, %s, %s[:P] or a teacher file", TeacherSynth, TeacherSynthMyopic, TeacherSynthLeaky)
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

// sftState is an SFT run's teacher and its targets, rendered once.
type sftState struct {
	teacher       Teacher
	judgePairs    int
	memoryChanges int
	ownMemories   bool
	seqs          [][]grpo.Sequence // per pool trajectory: its memory and judge calls, in turn order
	judge         [][]judgeCall     // per pool trajectory: its judge calls, in turn order
	changes       []seqRef          // the memory calls whose target changes the memory
}

// seqRef is one sequence of a pool trajectory: r.sft.seqs[traj][seq].
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
// opts.GRPO's beta, num_iterations, clip_epsilon and scale_rewards do not
// apply.
func SFT(ctx context.Context, opts Options, cfg SFTConfig, teacher Teacher) (*Result, error) {
	if teacher == nil {
		return nil, errors.New("sft: no teacher")
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
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sft.%w", err)
	}
	if _, ok := teacher.(Corrector); cfg.OwnMemories && !ok {
		return nil, fmt.Errorf("sft.own_memories: teacher %s cannot say what a model should write from its own memories (%s, %s and %s can)", teacher, TeacherSynth, TeacherSynthMyopic, TeacherSynthLeaky)
	}
	r := &run{opts: opts, sft: &sftState{teacher: teacher, judgePairs: cfg.JudgePairs, memoryChanges: cfg.MemoryChanges, ownMemories: cfg.OwnMemories && opts.Rollout.Variant == "mage"}}
	return r.loop(ctx)
}

// sftTargets renders the targets of every pool trajectory as sequences and
// drops the trajectories the teacher has nothing for.
func (r *run) sftTargets() error {
	o := r.opts
	var pool []*dataset.Trajectory
	var positive []bool
	var stats rollout.Stats
	skipped := 0
	for i, tr := range r.pool {
		seqs, changes, err := r.sftSequences(tr, &stats)
		if errors.Is(err, ErrNotTaught) {
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
			r.sft.changes = append(r.sft.changes, seqRef{traj: len(pool), seq: k})
		}
		pool = append(pool, tr)
		positive = append(positive, r.positive[i])
		r.sft.seqs = append(r.sft.seqs, seqs)
		r.sft.judge = append(r.sft.judge, judge)
	}
	if len(pool) == 0 {
		return fmt.Errorf("sft: teacher %s has targets for none of the %d trajectories of %s", r.sft.teacher, len(r.pool), o.Train.Data)
	}
	if ft, ok := r.sft.teacher.(*FileTeacher); ok {
		ids := map[string]bool{}
		for _, tr := range r.pool {
			ids[tr.ID] = true
		}
		if unused := ft.Unused(ids); len(unused) > 0 {
			return fmt.Errorf("sft: teacher %s: trajectory_id %q (and %d more) is not a trajectory with actions of %s", ft, unused[0], len(unused)-1, o.Train.Data)
		}
	}
	n := 0
	for _, s := range r.sft.seqs {
		n += len(s)
	}
	fmt.Fprintf(r.log, "sft: teacher %s: %d trajectories (%d left out without targets), %d calls; %d observations elided\n",
		r.sft.teacher, len(pool), skipped, n, stats.ElidedObs)
	r.pool, r.positive = pool, positive
	return nil
}

// sftSequences returns the memory and judge sequences of tr's window, and
// the indices among them of the memory calls whose target changes the
// memory (SFTConfig.MemoryChanges).
func (r *run) sftSequences(tr *dataset.Trajectory, stats *rollout.Stats) (seqs []grpo.Sequence, changes []int, err error) {
	s, e := r.window(tr)
	targets, err := r.sft.teacher.Targets(tr, s, e)
	if err != nil {
		return nil, nil, err
	}
	if len(targets) != e-s {
		return nil, nil, fmt.Errorf("teacher %s: %d targets for the %d turns of trajectory %s", r.sft.teacher, len(targets), e-s, tr.ID)
	}
	calls := r.guard.EpisodeCalls(&rollout.Episode{Traj: tr, Start: s, End: e}, stats)
	prev := ""
	for t, tg := range targets {
		where := fmt.Sprintf("trajectory %s turn %d", tr.ID, s+t)
		if tg.Where != "" {
			where = "teacher " + tg.Where + ": " + where
		}
		if c := calls.Memory(t, prev); c != nil {
			toks, forced, err := r.guard.Completion(rollout.MemoryRole, rollout.ToolCall{Name: rollout.MemoryToolName, Content: tg.Memory})
			if err != nil {
				return nil, nil, fmt.Errorf("%s: memory: %w", where, err)
			}
			if isChange(r.sft.teacher, prev, tg.Memory) {
				changes = append(changes, len(seqs))
			}
			seqs = append(seqs, teacherSequence(c.Prompt, toks, forced, grpo.PhaseMemory))
		}
		c := calls.Judge(t, tg.Memory)
		toks, forced, err := r.guard.Completion(rollout.JudgeRole, rollout.ToolCall{Name: rollout.JudgeToolName, Decision: tg.Decision, Rationale: tg.Rationale})
		if err != nil {
			return nil, nil, fmt.Errorf("%s: decision/rationale: %w", where, err)
		}
		seqs = append(seqs, teacherSequence(c.Prompt, toks, forced, grpo.PhaseJudge))
		prev = tg.Memory
	}
	return seqs, changes, nil
}

// isChange reports whether a memory call whose target is next, after the
// target prev, is one sft.memory_changes draws from: a target that differs
// from the previous one, or, for a teacher that says which calls add to
// the memory (an adder), one that adds.
func isChange(t Teacher, prev, next string) bool {
	if a, ok := t.(adder); ok {
		return a.Adds(prev, next)
	}
	return next != prev
}

// window is the turns [start, end) of tr that train runs on (rollout.Window).
func (r *run) window(tr *dataset.Trajectory) (start, end int) {
	labels := make([]int, len(tr.Turns))
	for t, tu := range tr.Turns {
		labels[t] = tu.Label
	}
	return rollout.Window(labels, r.opts.Train.MaxTurns)
}

// judgePairs returns the step's extra judge calls (SFTConfig.JudgePairs):
// for each of n attack runs with a label-1 action in their window, drawn
// from (seed, step) alone (shuffled, every run once before any repeats),
// the judge call of one label-1 turn and of one label-0 turn, both drawn
// at random, the label-0 one among the turns after the label-1 one when
// there are any.
func (r *run) judgePairs(step, n int) []grpo.Sequence {
	var runs []int
	for i, calls := range r.sft.judge {
		for _, c := range calls {
			if c.label == 1 {
				runs = append(runs, i)
				break
			}
		}
	}
	rng := rand.New(rand.NewPCG(r.opts.Train.Seed, uint64(step)+0x7a1f))
	var out []grpo.Sequence
	for k := 0; k < n && len(runs) > 0; k++ {
		if k%len(runs) == 0 {
			rng.Shuffle(len(runs), func(a, b int) { runs[a], runs[b] = runs[b], runs[a] })
		}
		i := runs[k%len(runs)]
		var pos, neg, after []int
		for _, c := range r.sft.judge[i] {
			switch {
			case c.label == 1:
				pos = append(pos, c.seq)
			case len(pos) > 0:
				after = append(after, c.seq)
			default:
				neg = append(neg, c.seq)
			}
		}
		p := pos[rng.IntN(len(pos))]
		out = append(out, r.sft.seqs[i][p])
		if len(after) > 0 {
			neg = after
		}
		if len(neg) > 0 {
			out = append(out, r.sft.seqs[i][neg[rng.IntN(len(neg))]])
		}
	}
	return out
}

// memoryChanges returns the step's extra memory calls
// (SFTConfig.MemoryChanges): n of the memory calls whose target changes the
// memory, drawn from (seed, step) alone, distinct while the pool lasts.
func (r *run) memoryChanges(step, n int) []grpo.Sequence {
	pool := r.sft.changes
	if n == 0 || len(pool) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(r.opts.Train.Seed, uint64(step)+0x3c5e))
	var out []grpo.Sequence
	for len(out) < n {
		for _, k := range rng.Perm(len(pool)) {
			if len(out) == n {
				break
			}
			out = append(out, r.sft.seqs[pool[k].traj][pool[k].seq])
		}
	}
	return out
}

// ownSequences renders the memory and judge calls of pool trajectories idx
// on the model's own memories (SFTConfig.OwnMemories): the guard loop runs
// greedily with the current weights, as eval runs it; each memory call is
// trained on the teacher's correction of the memory it was shown, each
// judge call on the teacher's call on the memory the model wrote. It also
// returns the share of the model's memories, and of its decisions, that
// already were those targets.
func (r *run) ownSequences(idx []int, step int) (seqs []grpo.Sequence, memRight, judgeRight float64, err error) {
	corr := r.sft.teacher.(Corrector)
	eps := make([]*rollout.Episode, len(idx))
	for k, i := range idx {
		s, e := r.window(r.pool[i])
		eps[k] = &rollout.Episode{Traj: r.pool[i], Start: s, End: e}
	}
	chains, _, err := r.guard.Run(eps, rollout.RunOptions{Chains: 1, Sampling: rollout.Sampling{
		Greedy: true, Temperature: 1, TopP: 1, Seed: seed.Mix(r.opts.Train.Seed, uint64(step)),
	}})
	if err != nil {
		return nil, 0, 0, err
	}
	n := 0
	for _, ch := range chains {
		ep, tr := ch.Episode, ch.Episode.Traj
		calls := r.guard.EpisodeCalls(ep, nil)
		prev := ""
		for t, tu := range ch.Turns {
			where := fmt.Sprintf("trajectory %s turn %d", tr.ID, ep.Start+t)
			target, err := corr.NextMemory(tr, ep.Start, ep.Start+t, prev)
			if err != nil {
				return nil, 0, 0, fmt.Errorf("%s: %w", where, err)
			}
			toks, forced, err := r.guard.Completion(rollout.MemoryRole, rollout.ToolCall{Name: rollout.MemoryToolName, Content: target})
			if err != nil {
				return nil, 0, 0, fmt.Errorf("%s: memory: %w", where, err)
			}
			seqs = append(seqs, teacherSequence(calls.Memory(t, prev).Prompt, toks, forced, grpo.PhaseMemory))
			own := tu.MemoryOut
			d, why := corr.JudgeOn(tr, ep.Start+t, own)
			toks, forced, err = r.guard.Completion(rollout.JudgeRole, rollout.ToolCall{Name: rollout.JudgeToolName, Decision: d, Rationale: why})
			if err != nil {
				return nil, 0, 0, fmt.Errorf("%s: decision/rationale: %w", where, err)
			}
			seqs = append(seqs, teacherSequence(calls.Judge(t, own).Prompt, toks, forced, grpo.PhaseJudge))
			if own == target {
				memRight++
			}
			if tu.Decision == d {
				judgeRight++
			}
			n++
			prev = own
		}
	}
	if n > 0 {
		memRight, judgeRight = memRight/float64(n), judgeRight/float64(n)
	}
	return seqs, memRight, judgeRight, nil
}

// teacherSequence is one teacher-forced call with advantage 1 (see SFT).
func teacherSequence(prompt, completion []int, forced []bool, phase grpo.Phase) grpo.Sequence {
	s := grpo.Sequence{Phase: phase, Advantage: 1, Forced: forced}
	s.Prompt = make([]int32, len(prompt))
	for i, id := range prompt {
		s.Prompt[i] = int32(id)
	}
	s.Completion = make([]int32, len(completion))
	for i, id := range completion {
		s.Completion[i] = int32(id)
	}
	return s
}

// sftStep runs one SFT step: sample trajectories, one optimizer step on
// all their calls.
func (r *run) sftStep(ctx context.Context, step int) (*SFTMetrics, error) {
	o := r.opts
	t0 := time.Now()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	m := &SFTMetrics{Step: step}
	var seqs []grpo.Sequence
	idx := SampleStep(r.positive, o.Train.Trajectories, o.Train.Balance, o.Train.Seed, step)
	if r.sft.ownMemories {
		own, memRight, judgeRight, err := r.ownSequences(idx, step)
		if err != nil {
			return nil, fmt.Errorf("step %d: own memories: %w", step, err)
		}
		seqs = append(seqs, own...)
		m.OwnMemoryRight, m.OwnJudgeRight = &memRight, &judgeRight
	} else {
		for _, i := range idx {
			seqs = append(seqs, r.sft.seqs[i]...)
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	seqs = append(seqs, r.judgePairs(step, r.sft.judgePairs)...)
	seqs = append(seqs, r.memoryChanges(step, r.sft.memoryChanges)...)
	// By phase and length, as in GRPO (less padding; the loss is a sum
	// over sequences, so order is free).
	sort.SliceStable(seqs, func(a, b int) bool {
		sa, sb := &seqs[a], &seqs[b]
		if sa.Phase != sb.Phase {
			return sa.Phase < sb.Phase
		}
		return len(sa.Prompt)+len(sa.Completion) < len(sb.Prompt)+len(sb.Completion)
	})
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
