package train

import (
	"bytes"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCurvesDrawAPanelPerMetricGroup: a GRPO run's metrics fill six
// panels (rewards, accuracy, violations, memory length, KL, held-out) in
// three rows of two; an SFT run's two (cross-entropy, held-out) in one. A
// panel is 4.5 × 3 inches at 96 dpi (432 × 288 pixels).
func TestCurvesDrawAPanelPerMetricGroup(t *testing.T) {
	grpoLine := func(step int) string {
		l := fmt.Sprintf(`{"step": %d, "reward_judge": 0.5, "reward_memory": 0.4, "accuracy_judge": 0.6, "reject_rate": 0.3, `+
			`"memory_format_violation_rate": 0, "judge_format_violation_rate": 0.1, "memory_chars": 40, "kl": 0.01, "loss": -0.2`, step)
		if step%2 == 0 {
			l += `, "eval": {"f1": 0.5, "asr": null, "bu": 1}`
		}
		return l + "}"
	}
	sftLine := func(step int) string {
		l := fmt.Sprintf(`{"step": %d, "loss": 2.5, "loss_memory": 2.7, "loss_judge": 2.1, "grad_norm": 1`, step)
		if step == 3 {
			l += `, "eval": {"f1": 0.9, "asr": 0.1, "bu": 0.95}`
		}
		return l + "}"
	}
	for _, tc := range []struct {
		name       string
		line       func(int) string
		rows, cols int
	}{{"grpo", grpoLine, 3, 2}, {"sft", sftLine, 1, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var lines []string
			for s := 1; s <= 4; s++ {
				lines = append(lines, tc.line(s))
			}
			metrics := filepath.Join(dir, "metrics.jsonl")
			if err := os.WriteFile(metrics, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, CurvesPNG)
			if err := WriteCurves(metrics, out); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if b := img.Bounds(); b.Dx() != tc.cols*432 || b.Dy() != tc.rows*288 {
				t.Errorf("%d × %d pixels, want %d × %d (%d rows of %d panels)", b.Dx(), b.Dy(), tc.cols*432, tc.rows*288, tc.rows, tc.cols)
			}
		})
	}
	// Nothing to draw, or a broken line: an error, no file.
	dir := t.TempDir()
	metrics := filepath.Join(dir, "metrics.jsonl")
	os.WriteFile(metrics, []byte(`{"step": 1}`+"\n"+`{"step": 2,`+"\n"), 0o644)
	if err := WriteCurves(metrics, filepath.Join(dir, CurvesPNG)); err == nil || !strings.Contains(err.Error(), "metrics.jsonl:2") {
		t.Errorf("a torn line: %v, want an error naming line 2", err)
	}
	if _, err := os.Stat(filepath.Join(dir, CurvesPNG)); err == nil {
		t.Error("a curves file was written")
	}
}

// TestProgressLineShowsHeldOutMetrics: an eval step's progress line shows
// its held-out F1, ASR and BU (null when undefined).
func TestProgressLineShowsHeldOutMetrics(t *testing.T) {
	var buf bytes.Buffer
	r := &run{opts: Options{Train: Config{Steps: 10}}, log: &buf}
	m := &SFTMetrics{Step: 4, Loss: 1.25, Elapsed: 8}
	m.setEval(map[string]any{"f1": 0.875, "asr": nil, "bu": 1.0})
	r.progress(4, m)
	r.progress(5, &Metrics{Step: 5, Elapsed: 10})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %q", len(lines), buf.String())
	}
	if want := "held-out F1 0.875 ASR null BU 1.000"; !strings.Contains(lines[0], want) || !strings.HasPrefix(lines[0], "step 4/10  cross-entropy 1.2500") {
		t.Errorf("eval step: %q, want step 4/10, the cross-entropy and %q", lines[0], want)
	}
	// 10 s for 5 steps: 10 s to go.
	if strings.Contains(lines[1], "held-out") || !strings.HasPrefix(lines[1], "step 5/10  reward judge") || !strings.HasSuffix(lines[1], "ETA 10s") {
		t.Errorf("a step without eval: %q", lines[1])
	}
}
