// Package train is mageguard's main job: training the guard on labeled
// trajectories, end to end. One harness (run) does what every training run
// needs — set-up, the loop over steps, checkpoints and resume,
// metrics.jsonl and curves.png, the periodic held-out eval with
// checkpoint-best, progress and Ctrl-C — and a stepper says what a step
// does: turn-wise GRPO (Run, grpoSteps: sample trajectories, run G
// shadow-memory chains of the guard over each (rollout), score every turn
// (rewards), turn the scores into per-turn per-phase advantages and update
// the model (grpo)), or the supervised warm start (SFT, sftSteps:
// cross-entropy on a teacher's targets, train/teacher).
//
// Data flows one way: dataset → rollout → rewards → grpo → checkpoint
// (docs/design.md#architecture).
package train

import (
	"context"
	"io"

	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/rewards"
	"github.com/mageguard/mageguard/rollout"
)

// Options is everything a training run needs: the configuration sections
// it reads, where it writes, and where it reports progress.
type Options struct {
	Model   model.Settings
	Rollout rollout.Config
	Rewards rewards.Config
	GRPO    grpo.Config
	Train   Config

	Out            string    // output directory: config.yaml, metrics.jsonl, rollouts.jsonl, checkpoint-N/
	Resume         bool      // continue from the newest checkpoint in Out
	ResolvedConfig []byte    // the fully resolved configuration, written to Out/config.yaml
	Progress       io.Writer // progress and logs (stderr); nil = discard

	// Evaluate, when set and Train.EvalEvery > 0, runs the held-out eval of
	// the current model every EvalEvery steps and returns report.json's
	// top-level metrics (logged into metrics.jsonl). dir is where it may
	// write its files.
	Evaluate func(ctx context.Context, m *model.Model, guard *rollout.Guard, step int, dir string) (map[string]any, error)
	// Metrics, when set, names the metrics Evaluate returns: a
	// train.best_metric not among them is refused before the first step
	// (cmd passes eval's report fields; train does not import eval).
	Metrics []string

	// OnBatch, when set, sees each step's rollout batch just before its update (with the
	// reference log-probs filled when β > 0): for recording batches (the update benchmark's
	// fixture) and debugging. It must not change the batch.
	OnBatch func(step int, b *grpo.Batch)
}

// Result says what a run produced.
type Result struct {
	Steps      int    // training steps completed (in total, over resumes)
	Checkpoint string // the newest checkpoint directory
	Stopped    bool   // the run stopped early on cancellation (after saving)
}

// A stepper is what a training run's steps do: GRPO's (grpoSteps) or
// SFT's (sftSteps). The harness (run) calls prepare once, then step for
// each step to run, then close.
type stepper interface {
	// prepare readies the steps once the harness has loaded the data, the
	// model and the guard, before it builds the trainer. resumeDir is the
	// checkpoint the run resumes from ("" when it starts afresh) and start
	// the steps it has done.
	prepare(r *run, resumeDir string, start int) error
	// step runs training step n (from 1) and returns its line of
	// metrics.jsonl. It returns ctx's error when ctx is cancelled before
	// the update.
	step(ctx context.Context, n int) (record, error)
	// close releases what prepare opened.
	close()
}

// record is one step's line of metrics.jsonl, GRPO's (Metrics) or SFT's
// (SFTMetrics).
type record interface {
	setEval(metrics map[string]any) // the held-out metrics of an eval step
	summary() string                // the step's progress line, without step count and ETA
	elapsed() float64               // seconds since the run (or resume) started
}

// Run trains with turn-wise GRPO (docs/design.md#turn-wise-grpo): it
// samples Train.Trajectories trajectories per step, runs G chains of the
// guard over each, scores them, and takes a GRPO update; it writes metrics
// every step and checkpoints every SaveEvery steps and at the end. When ctx
// is cancelled (Ctrl-C) it stops after saving a checkpoint of the last
// completed step.
func Run(ctx context.Context, opts Options) (*Result, error) {
	return (&run{opts: opts, steps: &grpoSteps{}}).loop(ctx)
}
