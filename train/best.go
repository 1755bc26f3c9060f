package train

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mageguard/mageguard/internal/atomicfile"
)

// bestTracker remembers the best held-out metric so far (best.json in the
// output directory, so a resumed run keeps it).
type bestTracker struct {
	Step   int      `json:"step"`
	Metric string   `json:"metric"`
	Value  *float64 `json:"value"`
}

func loadBest(out string) bestTracker {
	var b bestTracker
	if data, err := os.ReadFile(filepath.Join(out, "best.json")); err == nil {
		json.Unmarshal(data, &b)
	}
	return b
}

// better reports whether v beats the best so far for metric spec ("f1", or
// "-asr" when lower is better).
func (b *bestTracker) better(spec string, v float64) bool {
	if b.Value == nil || b.Metric != spec {
		return true
	}
	if strings.HasPrefix(spec, "-") {
		return v < *b.Value
	}
	return v > *b.Value
}

// evaluate runs the held-out eval into out/eval-STEP/, records its metrics
// in m, and copies the model to checkpoint-best when the chosen metric is
// the best so far.
func (r *run) evaluate(ctx context.Context, step int, m record) error {
	dir := filepath.Join(r.opts.Out, fmt.Sprintf("eval-%d", step))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(r.log, "eval at step %d → %s\n", step, dir)
	metrics, err := r.opts.Evaluate(ctx, r.model, r.guard, step, dir)
	if err != nil {
		return fmt.Errorf("step %d: eval: %w", step, err)
	}
	m.setEval(metrics)
	spec := r.opts.Train.BestMetric
	raw, ok := metrics[strings.TrimPrefix(spec, "-")]
	if !ok {
		return fmt.Errorf("train.best_metric %q: no such metric in the eval report", spec)
	}
	v, ok := raw.(float64)
	if !ok { // null: a zero denominator
		fmt.Fprintf(r.log, "eval at step %d: %s is null, checkpoint-best unchanged\n", step, spec)
		return nil
	}
	if !r.best.better(spec, v) {
		return nil
	}
	final := filepath.Join(r.opts.Out, "checkpoint-best")
	tmp := filepath.Join(r.opts.Out, ".checkpoint-best.tmp")
	os.RemoveAll(tmp)
	if err := r.saveModel(tmp); err != nil {
		return fmt.Errorf("checkpoint-best: %w", err)
	}
	best := bestTracker{Step: step, Metric: spec, Value: &v}
	data, _ := json.MarshalIndent(best, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(tmp, "best.json"), data); err != nil {
		return err
	}
	if err := atomicfile.ReplaceDir(tmp, final); err != nil {
		return fmt.Errorf("checkpoint-best: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(r.opts.Out, "best.json"), data); err != nil {
		return err
	}
	r.best = best
	fmt.Fprintf(r.log, "checkpoint-best: step %d, %s = %.4f\n", step, spec, v)
	return nil
}
