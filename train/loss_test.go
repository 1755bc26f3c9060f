package train

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/mageguard/mageguard/grpo"
)

// TestRolloutCorrectionMetrics: a run with a rollout correction writes the weights' mean and
// max, the share masked and the KL estimate to metrics.jsonl; the local model samples from the
// policy the trainer scores, so its recorded log-probs are π_old's up to float error (weights
// ≈ 1, nothing masked, KL ≈ 0); a run without a correction writes none of them.
func TestRolloutCorrectionMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	for _, corr := range []string{grpo.CorrectionNone, grpo.CorrectionTIS, grpo.CorrectionMIS} {
		t.Run(corr, func(t *testing.T) {
			o := microOptions(t, filepath.Join(t.TempDir(), "out"))
			o.GRPO.RolloutCorrection = corr
			if _, err := Run(context.Background(), o); err != nil {
				t.Fatal(err)
			}
			ms := readJSONL[Metrics](t, filepath.Join(o.Out, "metrics.jsonl"))
			if len(ms) != o.Train.Steps {
				t.Fatalf("%d metrics lines, want %d", len(ms), o.Train.Steps)
			}
			for _, m := range ms {
				if corr == grpo.CorrectionNone {
					if m.RolloutWeightMean != nil || m.RolloutWeightMax != nil || m.RolloutMasked != nil || m.RolloutKL != nil {
						t.Fatalf("step %d: correction figures without a correction", m.Step)
					}
					continue
				}
				if m.RolloutWeightMean == nil || m.RolloutWeightMax == nil || m.RolloutMasked == nil || m.RolloutKL == nil {
					t.Fatalf("step %d: correction figures missing", m.Step)
				}
				t.Logf("step %d: weights mean %v max %v, masked %v, KL %v", m.Step, *m.RolloutWeightMean, *m.RolloutWeightMax, *m.RolloutMasked, *m.RolloutKL)
				if w, mx := *m.RolloutWeightMean, *m.RolloutWeightMax; w < 0.999 || w > 1.001 || mx < w || mx > 1.001 {
					t.Errorf("step %d: weights mean %v max %v, want ≈ 1 (the local sampler is π_old)", m.Step, w, mx)
				}
				if *m.RolloutMasked != 0 || !(*m.RolloutKL >= 0 && *m.RolloutKL < 1e-5) {
					t.Errorf("step %d: masked %v, KL(π_rollout ‖ π_old) %v; want 0 and ≈ 0", m.Step, *m.RolloutMasked, *m.RolloutKL)
				}
			}
		})
	}
}
