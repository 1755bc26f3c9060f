package train

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/model/checkpoint"
	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/localgen"
	"github.com/mageguard/mageguard/rollout/openai"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/internal/lock"
)

// run is the harness of one training run: what every run loads, writes
// and keeps, whatever its steps do (steps).
type run struct {
	opts        Options
	steps       stepper
	log         io.Writer
	backend     backends.Backend
	tok         *tokenizer.Tokenizer
	model       *model.Model
	guard       *rollout.Guard
	remote      *openai.Generator // the server the rollouts run on (rollout.generator: openai); nil = the local model
	trainer     *grpo.Trainer
	pool        []*dataset.Trajectory
	positive    []bool
	tokFiles    checkpoint.TokenizerFiles // the tokenizer's files as the run began, written into every checkpoint
	metrics     *jsonlFile
	best        bestTracker
	started     time.Time
	resumedFrom int // steps done before this process started

	configChanges []ConfigChange // keys a resume changed (resumeconfig.go)
}

// loop sets the run up and runs its steps, with metrics, periodic evals,
// curves and checkpoints.
func (r *run) loop(ctx context.Context) (*Result, error) {
	opts := r.opts
	r.log, r.started = opts.Progress, time.Now()
	if r.log == nil {
		r.log = io.Discard
	}
	// The output folder is this run's alone, before anything is loaded: a
	// second run into it is refused at once, naming the holder's PID.
	if opts.Out == "" {
		return nil, fmt.Errorf("train: no output directory (--out)")
	}
	lk, err := lock.Acquire(opts.Out)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	defer lk.Release()
	start, err := r.setup()
	if err != nil {
		return nil, err
	}
	defer r.close()
	r.resumedFrom = start

	res := &Result{Steps: start}
	T := opts.Train
	lastSaved := -1
	if start > 0 {
		lastSaved = start
		res.Checkpoint = checkpointDir(opts.Out, start)
	}
	for step := start + 1; step <= T.Steps; step++ {
		if ctx.Err() != nil {
			res.Stopped = true
			break
		}
		m, err := r.steps.step(ctx, step)
		if errors.Is(err, context.Canceled) {
			res.Stopped = true
			break
		}
		if err != nil {
			return res, err
		}
		res.Steps = step
		if T.EvalEvery > 0 && step%T.EvalEvery == 0 {
			if err := r.evaluate(ctx, step, m); err != nil && !errors.Is(err, context.Canceled) {
				return res, err
			}
		}
		r.progress(step, m)
		if err := r.metrics.write(r.annotate(step, m)); err != nil {
			return res, err
		}
		r.writeCurves()
		if step == T.Steps || (T.SaveEvery > 0 && step%T.SaveEvery == 0) {
			dir, err := r.saveCheckpoint(step)
			if err != nil {
				return res, err
			}
			res.Checkpoint, lastSaved = dir, step
		}
	}
	if res.Stopped && res.Steps > lastSaved && res.Steps > 0 {
		fmt.Fprintf(r.log, "interrupted: saving checkpoint-%d\n", res.Steps)
		dir, err := r.saveCheckpoint(res.Steps)
		if err != nil {
			return res, err
		}
		res.Checkpoint = dir
	}
	return res, nil
}

// setup loads the data, the tokenizer, the model (from a checkpoint when
// resuming) and the guard, prepares the steps, builds the trainer, and
// opens metrics.jsonl. It returns the number of steps already done.
func (r *run) setup() (int, error) {
	o := r.opts
	resumeDir, start, err := r.checkStart()
	if err != nil {
		return 0, err
	}
	// Data: the trajectories with at least one action; both labels needed.
	if r.pool, r.positive, err = loadPool(o.Train.Data, r.log); err != nil {
		return 0, err
	}
	if err := r.loadModel(resumeDir, start); err != nil {
		return 0, err
	}
	if err := r.newGuard(); err != nil {
		return 0, err
	}
	if err := r.steps.prepare(r, resumeDir, start); err != nil {
		return 0, err
	}
	if err := r.newTrainer(resumeDir, start); err != nil {
		return 0, err
	}

	// Everything loaded: record the configuration this run uses.
	if o.ResolvedConfig != nil {
		if err := atomicfile.WriteFile(filepath.Join(o.Out, "config.yaml"), o.ResolvedConfig); err != nil {
			return 0, err
		}
	}
	if resumeDir != "" && o.GRPO.MasterDType != "float32" && o.Train.CheckpointDType == "bfloat16" && o.Model.DType == "float32" {
		fmt.Fprintf(r.log, "resume: warning: %s holds bfloat16 weights (train.checkpoint_dtype) and grpo.master_dtype is %s, so no float32 weights were saved: the run continues from rounded weights\n", resumeDir, o.GRPO.MasterDType)
	}

	// metrics.jsonl continues after the resumed step.
	if r.metrics, err = openJSONL(filepath.Join(o.Out, "metrics.jsonl"), start); err != nil {
		return 0, err
	}
	r.best = loadBest(o.Out)
	if r.best.Step > start { // from steps after the checkpoint, which are redone
		r.best = bestTracker{}
	}
	return start, nil
}

// checkStart refuses what the run cannot do, before anything is loaded,
// prepares the output folder, and finds the checkpoint to resume from ("",
// 0 when the run starts afresh).
func (r *run) checkStart() (resumeDir string, start int, err error) {
	o := r.opts
	if o.Rollout.Generator != rollout.GeneratorLocal && (o.Model.LoRA.Rank == 0 || o.Rollout.RemoteAPI == rollout.RemoteChat) {
		return "", 0, fmt.Errorf("train: rollout.generator is %q with model.lora.rank %d and remote_api %s: training needs the local model (its log-probs and gradients), set rollout.generator: %s, or train a LoRA adapter (model.lora.rank) that a vllm or sglang server loads after every step", o.Rollout.Generator, o.Model.LoRA.Rank, o.Rollout.RemoteAPI, rollout.GeneratorLocal)
	}
	if o.Rollout.Generator != rollout.GeneratorLocal && o.GRPO.Corrects() && (o.Rollout.TopP < 1 || o.Rollout.TopK > 0) {
		// A server's processed log-probs are those of the truncated distribution, π_old's are not:
		// the correction's weights would be off at every token.
		return "", 0, fmt.Errorf("train: grpo.rollout_correction %s with rollout.generator %s needs rollout.top_p 1 and rollout.top_k 0 (got %g and %d): the server's log-probs are those of the truncated distribution, π_old's are not", o.GRPO.RolloutCorrection, o.Rollout.Generator, o.Rollout.TopP, o.Rollout.TopK)
	}
	if o.Train.EvalEvery > 0 && o.Evaluate == nil {
		return "", 0, fmt.Errorf("train.eval_every is %d but this run has no evaluator", o.Train.EvalEvery)
	}
	if err := prepareOut(o.Out, o.Resume, r.log); err != nil {
		return "", 0, err
	}
	if resumeDir, start, err = latestCheckpoint(o.Out); err != nil {
		return "", 0, err
	}
	if !o.Resume {
		start, resumeDir = 0, ""
	} else if resumeDir == "" {
		fmt.Fprintf(r.log, "resume: no checkpoint in %s yet, starting from step 0\n", o.Out)
	} else if r.configChanges, err = resumeChanges(o.Out, o.ResolvedConfig, r.log); err != nil {
		return "", 0, err
	}
	// Fail fast on what would otherwise fail only later in the run.
	if o.Train.EvalEvery > 0 {
		if err := checkBestMetric(o.Train.BestMetric, o.Metrics); err != nil {
			return "", 0, err
		}
		evalTrajs, err := dataset.ReadAll(o.Train.EvalData)
		if err != nil {
			return "", 0, fmt.Errorf("train.eval_data: %w", err)
		}
		if !anyAction(evalTrajs) { // the eval would fail at its first step
			return "", 0, fmt.Errorf("train.eval_data %s: nothing to evaluate: %d trajectories, none with an action", o.Train.EvalData, len(evalTrajs))
		}
	}
	return resumeDir, start, nil
}

// newGuard builds the guard on its generator: the local model, or with
// rollout.generator openai the server at rollout.endpoint (its API key read
// from the environment variable rollout.api_key_env), asked for every
// sampled token's log-prob.
func (r *run) newGuard() error {
	o := r.opts
	var err error
	if o.Rollout.Generator != rollout.GeneratorOpenAI {
		r.guard, err = rollout.NewGuard(o.Rollout, r.tok, &localgen.Generator{Model: r.model})
		return err
	}
	fwd := &forwardGenerator{} // the server's generator needs the guard's stop tokens
	if r.guard, err = rollout.NewGuard(o.Rollout, r.tok, fwd); err != nil {
		return err
	}
	key := ""
	if o.Rollout.APIKeyEnv != "" {
		key = os.Getenv(o.Rollout.APIKeyEnv)
	}
	if r.remote, err = openai.New(o.Rollout.RemoteConfig, r.tok, r.guard.Stops(), key); err != nil {
		return err
	}
	r.remote.SampledLogProbs = true
	fwd.Generator = r.remote
	fmt.Fprintf(r.log, "rollouts: on %s (%s API), the adapter loaded after every step\n", o.Rollout.Endpoint, o.Rollout.RemoteAPI)
	return nil
}

// forwardGenerator forwards to the generator set after it was built.
type forwardGenerator struct{ generate.Generator }

// loadModel loads the tokenizer and the model: the checkpoint resumeDir
// when resuming, else model.path, else a random model from the model.*
// architecture keys and model.seed (model.Settings.LoadModel); with
// model.lora (or an adapter checkpoint) the model then trains a LoRA
// adapter on the frozen rest (model.Settings.PrepareAdapter).
func (r *run) loadModel(resumeDir string, start int) error {
	o := r.opts
	var tokDir string
	var err error
	if r.tok, tokDir, err = o.Model.LoadTokenizer(); err != nil {
		return err
	}
	if r.tokFiles, err = checkpoint.ReadTokenizerFiles(tokDir); err != nil {
		return fmt.Errorf("model.tokenizer: %w", err)
	}
	if r.backend, err = backend.New(o.Model.BackendConfig); err != nil {
		return err
	}
	if resumeDir != "" {
		s := o.Model
		s.Path = resumeDir
		if r.model, err = s.LoadModel(r.backend, r.tok); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		if err := s.PrepareAdapter(r.model); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		fmt.Fprintf(r.log, "resume: %s (step %d)\n", resumeDir, start)
	} else if r.model, err = o.Model.LoadModel(r.backend, r.tok); err != nil {
		return err
	} else if err := o.Model.PrepareAdapter(r.model); err != nil {
		return err
	}
	fmt.Fprintf(r.log, "model: %s, %d parameters\n", r.model.Config().String(), r.model.NumParameters())
	if a := r.model.Adapter(); a != nil {
		fmt.Fprintf(r.log, "model: training a %s (%d parameters) on the frozen %s\n",
			a.String(), model.NumAdapterParameters(r.model.Config(), a.Rank, a.Targets), r.model.AdapterBase())
	}
	return nil
}

// newTrainer builds the trainer of the model's weights (its policy at
// rollout.temperature) and, when resuming, restores its optimizer state.
func (r *run) newTrainer(resumeDir string, start int) error {
	o := r.opts
	m := r.model
	temperature := o.Rollout.Temperature
	policy := func(ctx *mlctx.Context, tokens, attnMask, targetPos *graph.Node) *graph.Node {
		return m.TokenLogProbs(ctx, tokens, attnMask, targetPos, temperature)
	}
	var err error
	if r.trainer, err = grpo.NewTrainer(r.backend, m.Context(), policy, o.GRPO, o.Train.Steps*o.GRPO.NumIterations); err != nil {
		return err
	}
	r.trainer.SetSharedPolicy(func(ctx *mlctx.Context, prefix, prefixMask, tokens, attnMask, targetPos *graph.Node) *graph.Node {
		return m.TokenLogProbsShared(ctx, prefix, prefixMask, tokens, attnMask, targetPos, temperature)
	})
	r.trainer.SetStagedPolicy(stagedPolicy(m, temperature))
	if resumeDir != "" {
		return r.restoreTrainer(resumeDir, start)
	}
	return nil
}

func (r *run) close() {
	if r.metrics != nil {
		r.metrics.close()
	}
	r.steps.close()
}

// sample returns the pool indices of step's trajectories (SampleStep with
// the train section's count, balance and seed).
func (r *run) sample(step int) []int {
	T := r.opts.Train
	return SampleStep(r.positive, T.Trajectories, T.Balance, T.Seed, step)
}

// window is the turns [start, end) of tr that train runs on (rollout.Window
// with train.max_turns).
func (r *run) window(tr *dataset.Trajectory) (start, end int) {
	labels := make([]int, len(tr.Turns))
	for t, tu := range tr.Turns {
		labels[t] = tu.Label
	}
	return rollout.Window(labels, r.opts.Train.MaxTurns)
}

// episodes returns the pool trajectories idx, each cut to its window.
func (r *run) episodes(idx []int) []*rollout.Episode {
	eps := make([]*rollout.Episode, len(idx))
	for k, i := range idx {
		s, e := r.window(r.pool[i])
		eps[k] = &rollout.Episode{Traj: r.pool[i], Start: s, End: e}
	}
	return eps
}

// sortForBatch orders sequences by phase, then length: micro-batches are
// padded to their longest row, and memory completions are longer than
// judge ones, so this keeps the padding small; the loss is a sum over
// sequences, so order is free.
func sortForBatch(seqs []grpo.Sequence) {
	sorted := make([]grpo.Sequence, len(seqs))
	for i, j := range batchOrder(seqs) {
		sorted[i] = seqs[j]
	}
	copy(seqs, sorted)
}

// batchOrder returns the indexes of seqs in sortForBatch's order.
func batchOrder(seqs []grpo.Sequence) []int {
	order := make([]int, len(seqs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		sa, sb := &seqs[order[a]], &seqs[order[b]]
		if sa.Phase != sb.Phase {
			return sa.Phase < sb.Phase
		}
		return len(sa.Prompt)+len(sa.Completion) < len(sb.Prompt)+len(sb.Completion)
	})
	return order
}

// newSequence is a GRPO sequence of prompt and completion (token ids) with
// the completion's forced-token flags, its phase, advantage and reward.
func newSequence(prompt, completion []int, forced []bool, phase grpo.Phase, adv, reward float32) grpo.Sequence {
	s := grpo.Sequence{Phase: phase, Advantage: adv, Reward: reward, Forced: forced}
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

// loadPool reads the training data and keeps the trajectories with at least
// one action; it fails when the data lacks either label.
func loadPool(path string, log io.Writer) ([]*dataset.Trajectory, []bool, error) {
	all, err := dataset.ReadAll(path)
	if err != nil {
		return nil, nil, fmt.Errorf("train.data: %w", err)
	}
	var pool []*dataset.Trajectory
	var positive []bool
	labels := [2]int{}
	for _, t := range all {
		if len(t.Turns) == 0 {
			continue
		}
		for _, tu := range t.Turns {
			labels[tu.Label]++
		}
		pool = append(pool, t)
		positive = append(positive, t.IsAttack() && t.Positives() > 0)
	}
	if labels[0] == 0 || labels[1] == 0 {
		return nil, nil, fmt.Errorf("train.data %s: needs actions of both labels, has %d labeled 0 and %d labeled 1", path, labels[0], labels[1])
	}
	npos := 0
	for _, p := range positive {
		if p {
			npos++
		}
	}
	fmt.Fprintf(log, "data: %s: %d trajectories with actions (%d skipped without), %d with a label-1 action; actions %d/%d (0/1)\n",
		path, len(pool), len(all)-len(pool), npos, labels[0], labels[1])
	return pool, positive, nil
}

// anyAction reports whether some trajectory has an action.
func anyAction(trajs []*dataset.Trajectory) bool {
	for _, t := range trajs {
		if len(t.Turns) > 0 {
			return true
		}
	}
	return false
}

// checkBestMetric checks that train.best_metric names one of the metrics
// the evaluator returns (optionally with a leading '-': lower is better);
// with no names given, the first eval checks it.
func checkBestMetric(spec string, names []string) error {
	if len(names) == 0 || slices.Contains(names, strings.TrimPrefix(spec, "-")) {
		return nil
	}
	return fmt.Errorf("train.best_metric %q: not a metric of the eval report (one of %s, with an optional leading '-')", spec, strings.Join(names, ", "))
}

// stagedPolicy is the model split into stages for grpo's activation checkpointing
// (grpo.gradient_checkpointing).
func stagedPolicy(m *model.Model, temperature float64) grpo.StagedPolicy {
	conv := func(in grpo.StageInputs) model.StageInputs {
		return model.StageInputs{Prefix: in.Prefix, PrefixMask: in.PrefixMask, Tokens: in.Tokens, AttnMask: in.AttnMask}
	}
	return grpo.StagedPolicy{
		Layers: m.NumLayers(),
		Embed:  func(ctx *mlctx.Context, in grpo.StageInputs) []*graph.Node { return m.StageEmbed(ctx, conv(in)) },
		Layer: func(ctx *mlctx.Context, i int, state []*graph.Node, in grpo.StageInputs) []*graph.Node {
			return m.StageLayer(ctx, i, state, conv(in))
		},
		Head: func(ctx *mlctx.Context, state []*graph.Node, in grpo.StageInputs, targetPos *graph.Node) *graph.Node {
			return m.StageHead(ctx, state, conv(in), targetPos, temperature)
		},
	}
}
