package grpo

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive // graph code reads as equations
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// StateScope is the context scope under which the trainer keeps its own variables (gradient
// accumulators and AdamW moments). A model checkpoint should leave it out.
const StateScope = "/grpo"

// Trainer runs turn-wise GRPO optimizer steps on the trainable variables of a context: all the
// model's weights, or — with a LoRA adapter attached (model.Model.AddAdapter), which leaves the
// base weights not trainable — the adapter's alone, with gradient accumulators, AdamW moments
// and float32 masters for those only.
// It holds no random state: the same batches from the same weights and optimizer state give
// the same updates, so a resumed run equals an uninterrupted one.
type Trainer struct {
	cfg     Config
	backend backends.Backend
	ctx     *context.Context
	policy  PolicyFn
	// sharedPolicy, when set (SetSharedPolicy), runs the micro-batches whose rows share a
	// prefix (Config.SharedPrefix).
	sharedPolicy SharedPolicyFn
	staged       *StagedPolicy // the policy in stages (SetStagedPolicy), for Config.GradientCheckpointing
	stageExecs   map[stageKey]*context.Exec
	totalSteps   int
	step         int // optimizer steps taken

	trainExecs   map[trainKey]*context.Exec
	logProbExecs map[logProbKey]*context.Exec
	params       []*context.Variable        // the trained variables, fixed by the first training graph
	groups       [][]*context.Variable      // params split into update groups (updateGroups)
	norm         *context.Exec              // the gradient-norm graph
	groupExecs   map[int]*context.Exec      // each update group's AdamW graph
	pending      map[string]*tensors.Tensor // optimizer state set before its variables existed
	graphsBuilt  int                        // training graphs built (one per exec and shape)
	recordTokens bool                       // steps return each token's log-prob and loss term (SetRecordTokens)
}

// trainKey picks a training graph: old, ref and rollout say which log-probs are inputs;
// shared, whether the rows' prefix is an input of its own; tokens, whether the graph returns
// per-token values.
type trainKey struct{ hasOld, hasRef, hasRollout, shared, tokens bool }

// logProbKey picks a log-prob graph: the variables' context and whether a prefix is shared.
type logProbKey struct {
	ctx    *context.Context
	shared bool
}

// NewTrainer returns a trainer of the trainable variables of ctx used by policy. totalSteps is
// the number of optimizer steps the run will take (needed by the linear and cosine schedules;
// ignored by constant). The optimizer state starts empty at step 0.
func NewTrainer(backend backends.Backend, ctx *context.Context, policy PolicyFn, cfg Config, totalSteps int) (*Trainer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("grpo: %w", err)
	}
	if cfg.LRSchedule != ScheduleConstant && totalSteps <= 0 {
		return nil, fmt.Errorf("grpo: lr_schedule %s needs the total number of steps, got %d", cfg.LRSchedule, totalSteps)
	}
	return &Trainer{
		cfg: cfg, backend: backend, ctx: ctx, policy: policy, totalSteps: totalSteps,
		trainExecs:   map[trainKey]*context.Exec{},
		logProbExecs: map[logProbKey]*context.Exec{},
		groupExecs:   map[int]*context.Exec{},
		stageExecs:   map[stageKey]*context.Exec{},
	}, nil
}

// checkpointing reports whether steps run the staged policy (activation checkpointing).
func (t *Trainer) checkpointing() bool { return t.cfg.GradientCheckpointing && t.staged != nil }

// stagedParams fixes the trained variables of the staged path, the first time: every
// trainable variable of the context but the trainer's own state, checked against a restored
// optimizer state.
func (t *Trainer) stagedParams() error {
	if t.params != nil {
		return nil
	}
	var vars []*context.Variable
	for v := range t.ctx.IterVariables() {
		if v.Trainable && !strings.HasPrefix(v.Scope(), StateScope) {
			vars = append(vars, v)
		}
	}
	if len(vars) == 0 {
		return errors.New("grpo: the context has no trainable variable")
	}
	if err := t.checkPendingState(vars); err != nil {
		return err
	}
	t.params = vars
	return nil
}

// SetSharedPolicy gives the trainer a policy for rows that share a prefix: with
// Config.SharedPrefix, a micro-batch whose rows share at least minSharedPrefix leading tokens
// runs it, with the prefix computed once (in the update, π_old and π_ref alike). Call it
// before the first step; fn must agree with the PolicyFn (SharedPolicyFn's contract).
func (t *Trainer) SetSharedPolicy(fn SharedPolicyFn) { t.sharedPolicy = fn }

// SetRecordTokens makes every step return each token's log π_θ and loss term ℓ_k and each
// sequence's aggregation weight (Stats.Terms). It turns Config.SkipZeroAdvantage off, so that
// every sequence has its terms; the update is the same either way.
func (t *Trainer) SetRecordTokens(on bool) { t.recordTokens = on }

// Steps returns the number of optimizer steps taken (restored by SetOptimizerState).
func (t *Trainer) Steps() int { return t.step }

// Update runs num_iterations (μ) optimizer steps on one rollout batch. With μ > 1 and no
// OldLogProbs, it first fills b.OldLogProbs with the current policy's log-probs: π_old is the
// policy that generated the rollouts, i.e. the current weights. With μ = 1 they are not needed
// (the ratio is 1 and still carries the gradient).
func (t *Trainer) Update(b *Batch) ([]Stats, error) {
	if t.cfg.NumIterations > 1 && b.OldLogProbs == nil {
		old, err := t.LogProbs(t.ctx, b)
		if err != nil {
			return nil, fmt.Errorf("grpo step %d: old log-probs: %w", t.step+1, err)
		}
		b.OldLogProbs = old
	}
	var all []Stats
	for range t.cfg.NumIterations {
		s, err := t.Step(b)
		if err != nil {
			return all, err
		}
		all = append(all, s)
	}
	return all, nil
}

// Step runs one optimizer step on b: forward and backward over micro-batches of
// micro_batch_size sequences, gradient accumulation, global-norm clipping and AdamW on the
// trained variables. A loss or gradient that is not finite is an error naming the step, and
// leaves the weights and optimizer state unchanged.
func (t *Trainer) Step(b *Batch) (Stats, error) {
	n := t.step + 1
	hasRef := b.RefLogProbs != nil
	if err := b.validate(t.cfg.Beta > 0, t.cfg.Corrects()); err != nil {
		return Stats{}, fmt.Errorf("grpo step %d: %w", n, err)
	}
	st := Stats{Step: n, LR: LearningRate(t.cfg, t.step, t.totalSteps)}
	seqTokens := make([]int, b.Len())
	for i, row := range b.LossMask {
		for _, m := range row {
			seqTokens[i] += int(m)
		}
		if seqTokens[i] > 0 {
			st.Sequences++
		}
		st.Tokens += seqTokens[i]
	}
	if st.Tokens == 0 {
		return Stats{}, fmt.Errorf("grpo step %d: the batch has no counted completion tokens", n)
	}
	denom := float32(st.Sequences)
	if t.cfg.Aggregation() == AggTokenMean {
		denom = float32(st.Tokens)
	}

	// Adam's bias corrections 1/(1−β^t), computed here in float64.
	c1 := float32(1 / (1 - math.Pow(t.cfg.AdamBeta1, float64(n))))
	c2 := float32(1 / (1 - math.Pow(t.cfg.AdamBeta2, float64(n))))

	// The sequences that run: all, or (skip_zero_advantage, β = 0) those with a non-zero
	// advantage, whose loss and gradient are the whole step's: the others' are exactly 0.
	// A rollout correction runs them all: its metrics are over every sequence of the step,
	// whether skipping is on or not (and whether tokens are logged or not).
	run, ran := b, []int(nil)
	if t.cfg.SkipZeroAdvantage && t.cfg.Beta == 0 && !t.recordTokens && !t.cfg.Corrects() {
		ran = nonzeroAdvantageRows(b, seqTokens)
		run = b.subset(ran)
	}
	var seqs seqDiagnostics
	if t.recordTokens {
		st.Terms = newTokenTerms(b, seqTokens, float64(denom), t.cfg.Aggregation())
	}
	for ci, rows := range t.chunks(run) {
		shared := t.sharedPrefix(run, rows)
		key := trainKey{hasOld: b.OldLogProbs != nil, hasRef: hasRef, hasRollout: t.cfg.Corrects(), shared: shared > 0, tokens: t.recordTokens}
		mb := pack(run, rows, t.rowsFor(len(rows)), shared, key.hasOld, key.hasRef, key.hasRollout)
		var res []*tensors.Tensor
		var err error
		if t.checkpointing() {
			if err := t.stagedParams(); err != nil {
				mb.finalize()
				return Stats{}, fmt.Errorf("grpo step %d: %w", n, err)
			}
			res, err = t.checkpointedMicroBatch(&mb, key, denom)
		} else {
			var exec *context.Exec
			if exec, err = t.trainExec(key); err != nil {
				mb.finalize()
				return Stats{}, fmt.Errorf("grpo step %d: %w", n, err)
			}
			res, err = exec.Exec(trainArgs(key, &mb, denom)...)
		}
		mb.finalize()
		if err != nil {
			if rerr := t.resetAccumulators(); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return Stats{}, fmt.Errorf("grpo step %d micro-batch %d: %w", n, ci, err)
		}
		out := readTrainOutputs(key, res)
		st.Loss += float64(tensors.ToScalar[float32](out.loss))
		seqs.ratio = append(seqs.ratio, rowsOf(out.seqRatio, len(rows))...)
		seqs.kl = append(seqs.kl, rowsOf(out.seqKL, len(rows))...)
		seqs.clipped = append(seqs.clipped, rowsOf(out.seqClipped, len(rows))...)
		seqs.negLogP = append(seqs.negLogP, rowsOf(out.seqNegLogP, len(rows))...)
		if key.hasRollout {
			seqs.weight = append(seqs.weight, rowsOf(out.seqWeight, len(rows))...)
			seqs.weightMax = append(seqs.weightMax, rowsOf(out.seqWeightMax, len(rows))...)
			seqs.masked = append(seqs.masked, rowsOf(out.seqMasked, len(rows))...)
			seqs.rolloutKL = append(seqs.rolloutKL, rowsOf(out.seqRolloutKL, len(rows))...)
		}
		if key.tokens {
			st.Terms.fill(run, rows, out.logp, out.perToken)
		}
		for _, o := range res {
			o.FinalizeAll()
		}
	}
	var err error
	if st.GradNorm, err = t.update(float32(st.LR), c1, c2, st.Loss); err != nil {
		if rerr := t.resetAccumulators(); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return Stats{}, fmt.Errorf("grpo step %d: %w", n, err)
	}
	t.step = n
	st.summarize(b, seqTokens, seqs, ran)
	return st, nil
}

// nonzeroAdvantageRows returns the rows of b with a counted token and a non-zero advantage;
// when there is none, the first row with a counted token, so that a training graph still runs
// (its gradient is 0: the step is AdamW's with zero gradients, as without skipping).
func nonzeroAdvantageRows(b *Batch, seqTokens []int) []int {
	var rows []int
	first := -1
	for i, a := range b.Advantages {
		if seqTokens[i] == 0 {
			continue
		}
		if first < 0 {
			first = i
		}
		if a != 0 {
			rows = append(rows, i)
		}
	}
	if len(rows) == 0 {
		rows = []int{first}
	}
	return rows
}

// LogProbs returns log π(TargetPos) [B][K] of b's sequences under the policy with the
// variables of ctx: the trainer's own context gives π_old, a reference context (FrozenCopy of
// the starting model, or — when only a LoRA adapter is trained — model.WithoutAdapter of the
// trainer's own context: the frozen base, no copy) gives π_ref. Entries whose LossMask is 0 are 0. Each distinct ctx value
// gets its own compiled graphs: pass the same *context.Context every time.
func (t *Trainer) LogProbs(ctx *context.Context, b *Batch) ([][]float32, error) {
	if err := b.validate(false, false); err != nil {
		return nil, err
	}
	K := len(b.TargetPos[0])
	out := make([][]float32, b.Len())
	for _, rows := range t.chunks(b) {
		n := t.sharedPrefix(b, rows)
		exec, err := t.logProbExec(ctx, n > 0)
		if err != nil {
			return nil, err
		}
		mb := pack(b, rows, t.rowsFor(len(rows)), n, false, false, false)
		args := []any{mb.tokens, mb.attn, mb.pos}
		if mb.shared() {
			args = append([]any{mb.prefix, mb.prefixMask}, args...)
		}
		res, err := exec.Exec(args...)
		mb.finalize()
		if err != nil {
			return nil, err
		}
		flat := tensors.MustCopyFlatData[float32](res[0])
		res[0].FinalizeAll()
		for r, i := range rows {
			out[i] = make([]float32, K)
			for k := range min(K, mb.K) {
				if b.LossMask[i][k] == 0 {
					continue
				}
				v := flat[r*mb.K+k]
				if !finite32(v) {
					return nil, fmt.Errorf("sequence %d token %d: log-prob is %v", i, k, v)
				}
				out[i][k] = v
			}
		}
	}
	return out, nil
}

// logProbExec returns the log-prob graph of the policy on ctx's variables: inputs tokens,
// attn, pos, with prefix and prefixMask first when shared.
func (t *Trainer) logProbExec(ctx *context.Context, shared bool) (*context.Exec, error) {
	key := logProbKey{ctx, shared}
	if e, ok := t.logProbExecs[key]; ok {
		return e, nil
	}
	e, err := context.NewExec(t.backend, reuseIfLoaded(ctx), func(ctx *context.Context, in []*Node) *Node {
		var prefix, prefixMask *Node
		if shared {
			prefix, prefixMask, in = in[0], in[1], in[2:]
		}
		return ConvertDType(t.callPolicy(ctx, prefix, prefixMask, in[0], in[1], in[2]), float32DType)
	})
	if err != nil {
		return nil, err
	}
	e.SetMaxCache(maxCompiledShapes)
	t.logProbExecs[key] = e
	return e, nil
}

// FrozenCopy returns a new context holding copies of ctx's variables, not trainable, without
// the trainer's own state (StateScope): the frozen reference policy π_ref for LogProbs. With
// beta = 0 no reference is needed.
func FrozenCopy(ctx *context.Context) (*context.Context, error) {
	ref := context.New()
	for v := range ctx.IterVariables() {
		if v.Scope() == StateScope || strings.HasPrefix(v.Scope(), StateScope+context.ScopeSeparator) {
			continue
		}
		c, err := v.CloneToContext(ref)
		if err != nil {
			return nil, fmt.Errorf("grpo: copy variable %s: %w", v.ScopeAndName(), err)
		}
		c.SetTrainable(false)
	}
	return ref, nil
}

// maxCompiledShapes bounds each exec's cache of compiled graphs (GoMLX's default is 32).
const maxCompiledShapes = 128

// reuseIfLoaded marks ctx for reuse when its variables already exist, so a policy building a
// second graph (another shape or exec) finds its variables instead of creating them.
func reuseIfLoaded(ctx *context.Context) *context.Context {
	if ctx.NumVariables() > 0 {
		return ctx.Reuse()
	}
	return ctx
}
