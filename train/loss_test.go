package train

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
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

// TestTokensFollowTheFormulas: a tiny run with grpo.num_iterations 2, for each loss and each
// rollout correction, writes tokens.jsonl whose every loss_term follows the loss's formula
// (docs/design.md#turn-wise-grpo, written out here again) from the record's own log-probs,
// whose weights are the aggregation's, and whose terms sum, over a step's last iteration, to
// the step's loss in metrics.jsonl.
func TestTokensFollowTheFormulas(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	cases := []struct {
		name string
		edit func(g *grpo.Config)
	}{
		{"grpo", func(g *grpo.Config) {}},
		{"dapo, clip-higher, beta 0.04", func(g *grpo.Config) { g.Loss, g.ClipEpsilonHigh, g.Beta = grpo.LossDAPO, 0.28, 0.04 }},
		{"gspo", func(g *grpo.Config) { g.Loss, g.ClipEpsilon = grpo.LossGSPO, 0.05 }},
		{"cispo, beta 0.04", func(g *grpo.Config) { g.Loss, g.ClipEpsilonHigh, g.Beta = grpo.LossCISPO, 4, 0.04 }},
		{"tis per token, cap 1", func(g *grpo.Config) { g.RolloutCorrection, g.RolloutCorrectionCap = grpo.CorrectionTIS, 1 }},
		{"tis per sequence", func(g *grpo.Config) {
			g.RolloutCorrection, g.RolloutCorrectionLevel = grpo.CorrectionTIS, grpo.LevelSequence
		}},
		{"mis per token, cap 1", func(g *grpo.Config) { g.RolloutCorrection, g.RolloutCorrectionCap = grpo.CorrectionMIS, 1 }},
		{"mis per sequence, token-mean", func(g *grpo.Config) {
			g.RolloutCorrection, g.RolloutCorrectionLevel, g.LossAggregation = grpo.CorrectionMIS, grpo.LevelSequence, grpo.AggTokenMean
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := microOptions(t, filepath.Join(t.TempDir(), "out"))
			o.Train.LogTokens, o.GRPO.NumIterations, o.Train.Steps = true, 2, 1
			o.GRPO.LearningRate = 0.2 // π_θ moves away from π_old by the second iteration
			c.edit(&o.GRPO)
			if _, err := Run(context.Background(), o); err != nil {
				t.Fatal(err)
			}
			checkTokens(t, o.GRPO, readJSONL[tokenRecord](t, filepath.Join(o.Out, "tokens.jsonl")), readJSONL[Metrics](t, filepath.Join(o.Out, "metrics.jsonl")))
		})
	}
}

// checkTokens recomputes every loss term, weight and step loss of recs.
func checkTokens(t *testing.T, g grpo.Config, recs []tokenRecord, ms []Metrics) {
	t.Helper()
	type key struct{ step, iteration int }
	byIter := map[key][]tokenRecord{}
	for _, r := range recs {
		byIter[key{r.Step, r.Iteration}] = append(byIter[key{r.Step, r.Iteration}], r)
	}
	if len(byIter) != len(ms)*g.NumIterations {
		t.Fatalf("records of %d (step, iteration) pairs, want %d", len(byIter), len(ms)*g.NumIterations)
	}
	epsHigh := g.ClipEpsilonHigh
	if epsHigh == 0 {
		epsHigh = g.ClipEpsilon
	}
	lo, hi, C := 1-g.ClipEpsilon, 1+epsHigh, g.RolloutCorrectionCap
	clip := func(x float64) float64 { return math.Min(math.Max(x, lo), hi) }
	tokenMean := g.LossAggregation == grpo.AggTokenMean || g.Loss == grpo.LossDAPO
	forced, moved, corrected := 0, 0.0, 0
	for k, rs := range byIter {
		nTok, nSeq := 0.0, 0.0
		for _, r := range rs {
			n := 0.0
			for _, m := range r.Mask {
				n += float64(m)
			}
			nTok += n
			if n > 0 {
				nSeq++
			}
		}
		loss := 0.0
		for _, r := range rs {
			K := len(r.Mask)
			if len(r.LogP) != K || len(r.LogPOld) != K || len(r.LossTerm) != K || (r.LogPRef != nil && len(r.LogPRef) != K) || len(r.LogPRollout) != K {
				t.Fatalf("step %d iteration %d: per-token arrays of different lengths", k.step, k.iteration)
			}
			if (g.Beta > 0) != (r.LogPRef != nil) {
				t.Fatalf("logp_ref %v with beta %v", r.LogPRef, g.Beta)
			}
			n, sumD, sumLogR := 0.0, 0.0, 0.0
			for i, m := range r.Mask {
				if m != 0 && m != 1 {
					t.Fatalf("mask %d", m)
				}
				if m == 0 {
					forced++
					continue
				}
				n++
				sumD += float64(r.LogP[i]) - float64(r.LogPOld[i])
				sumLogR += float64(r.LogPOld[i]) - float64(r.LogPRollout[i])
			}
			wantWeight := 0.0
			if n > 0 {
				wantWeight = 1 / nTok
				if !tokenMean {
					wantWeight = 1 / (nSeq * n)
				}
			}
			if math.Abs(r.Weight-wantWeight) > 1e-12 {
				t.Fatalf("step %d iteration %d: weight %v, want %v", k.step, k.iteration, r.Weight, wantWeight)
			}
			A := float64(r.Advantage)
			s := math.Exp(sumD / math.Max(1, n)) // GSPO's sequence ratio
			termSum := 0.0
			for i, m := range r.Mask {
				if m == 0 {
					if r.LossTerm[i] != 0 {
						t.Fatalf("a forced token has loss term %v", r.LossTerm[i])
					}
					continue
				}
				lp, old := float64(r.LogP[i]), float64(r.LogPOld[i])
				rho := math.Exp(lp - old)
				moved = math.Max(moved, math.Abs(lp-old))
				var obj float64
				switch g.Loss {
				case grpo.LossGSPO:
					obj = math.Min(s*A, clip(s)*A)
				case grpo.LossCISPO:
					obj = math.Min(rho, hi) * A * lp
				default:
					obj = math.Min(rho*A, clip(rho)*A)
				}
				c := 1.0
				if g.RolloutCorrection != grpo.CorrectionNone {
					logR := old - float64(r.LogPRollout[i])
					if g.RolloutCorrectionLevel == grpo.LevelSequence {
						logR = sumLogR
					}
					ratio := math.Exp(logR)
					if g.RolloutCorrection == grpo.CorrectionTIS {
						c = math.Min(ratio, C)
					} else if ratio < 1/C || ratio > C {
						c = 0
					}
					if c != 1 {
						corrected++
					}
				}
				kl := 0.0
				if r.LogPRef != nil {
					d := float64(r.LogPRef[i]) - lp
					kl = math.Exp(d) - d - 1
				}
				want := -c*obj + g.Beta*kl
				if math.Abs(float64(r.LossTerm[i])-want) > 2e-5*math.Max(1, math.Abs(want)) {
					t.Fatalf("step %d iteration %d %s %s turn %d chain %d token %d: loss_term %v, formula %v",
						k.step, k.iteration, r.Role, r.TrajectoryID, r.Turn, r.Chain, i, r.LossTerm[i], want)
				}
				termSum += float64(r.LossTerm[i])
			}
			loss += r.Weight * termSum
		}
		if k.iteration == g.NumIterations {
			m := ms[k.step-1]
			if math.Abs(m.Loss-loss) > 1e-5*math.Max(1, math.Abs(loss)) || float64(m.Sequences) != nSeq || float64(m.CompletionTokens) != nTok {
				t.Errorf("step %d: metrics loss %v seqs %d tokens %d; from tokens.jsonl %v, %v, %v", k.step, m.Loss, m.Sequences, m.CompletionTokens, loss, nSeq, nTok)
			}
		}
	}
	t.Logf("%d records, %d forced tokens, largest |log π_θ − log π_old| %.3g, %d tokens with c ≠ 1", len(recs), forced, moved, corrected)
	if forced == 0 {
		t.Error("no forced token: the mask is not exercised")
	}
	if moved < 1e-3 {
		t.Errorf("largest |log π_θ − log π_old| %v: the ratio is not exercised", moved)
	}
	if g.RolloutCorrection != grpo.CorrectionNone && g.RolloutCorrectionCap == 1 && corrected == 0 {
		t.Error("no weight differs from 1: the correction is not exercised")
	}
}

// TestDynamicSampling: with grpo.dynamic_sampling every step trains on trajectories with a
// non-zero advantage, as many as train.trajectories when the draws find them, drawing more
// when the first draw has too few; when no draw has any (nothing parses: every group earns one
// reward), the budget is spent, said in the log, and the step trains on its first draw.
func TestDynamicSampling(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	t.Run("draws until it has enough", func(t *testing.T) {
		o := microOptions(t, filepath.Join(t.TempDir(), "out"))
		o.GRPO.DynamicSampling, o.Train.Trajectories, o.Train.Steps = true, 3, 3
		if _, err := Run(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		ms := readJSONL[Metrics](t, filepath.Join(o.Out, "metrics.jsonl"))
		rows := readJSONL[rolloutRow](t, filepath.Join(o.Out, "rollouts.jsonl"))
		extra := 0
		for _, m := range ms {
			if m.DynamicDraws == nil || m.DynamicKept == nil {
				t.Fatalf("step %d: no dynamic sampling figures", m.Step)
			}
			draws, kept := *m.DynamicDraws, *m.DynamicKept
			extra += draws - 1
			if draws < 1 || draws > 1+o.GRPO.DynamicSamplingDraws || kept > o.Train.Trajectories || (kept < o.Train.Trajectories && draws != 1+o.GRPO.DynamicSamplingDraws) {
				t.Errorf("step %d: %d draws, %d kept", m.Step, draws, kept)
			}
			// rollouts.jsonl holds the trained groups: kept of them, each with a non-zero advantage.
			G := o.Rollout.GroupSize
			groups := map[string]bool{} // trajectory (with its draw's rows) → some non-zero advantage
			n := 0
			for _, r := range rows {
				if r.Step != m.Step {
					continue
				}
				n++
				groups[r.TrajectoryID] = groups[r.TrajectoryID] || r.AdvantageJudge != 0 || r.AdvantageMemory != 0
			}
			if n != kept*G*o.Train.MaxTurns {
				t.Errorf("step %d: %d rollout rows, want %d kept × %d chains", m.Step, n, kept, G)
			}
			for id, nonzero := range groups {
				if !nonzero {
					t.Errorf("step %d: trajectory %s trained with advantage 0 everywhere", m.Step, id)
				}
			}
			if kept > 0 && len(groups) != kept {
				t.Errorf("step %d: %d distinct trajectories in rollouts.jsonl, %d kept: one kept twice", m.Step, len(groups), kept)
			}
		}
		if extra == 0 {
			t.Error("no step drew more: the extra draws are not exercised")
		}
	})
	t.Run("a pool smaller than train.trajectories", func(t *testing.T) {
		o := microOptions(t, filepath.Join(t.TempDir(), "out"))
		o.GRPO.DynamicSampling, o.GRPO.DynamicSamplingDraws, o.Train.Trajectories, o.Train.Steps = true, 6, 50, 2
		var log strings.Builder
		o.Progress = &log
		if _, err := Run(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		var pool int
		if _, err := fmt.Sscanf(log.String()[strings.Index(log.String(), "data: "):], "data: testdata/micro.jsonl: %d trajectories", &pool); err != nil || pool == 0 || pool >= o.Train.Trajectories {
			t.Fatalf("pool of %d trajectories (%v); want one smaller than %d", pool, err, o.Train.Trajectories)
		}
		rows := readJSONL[rolloutRow](t, filepath.Join(o.Out, "rollouts.jsonl"))
		for _, m := range readJSONL[Metrics](t, filepath.Join(o.Out, "metrics.jsonl")) {
			draws, kept := *m.DynamicDraws, *m.DynamicKept
			ids := map[string]int{}
			for _, r := range rows {
				if r.Step == m.Step {
					ids[r.TrajectoryID]++
				}
			}
			for id, n := range ids {
				if want := o.Rollout.GroupSize * o.Train.MaxTurns; kept > 0 && n != want {
					t.Errorf("step %d: trajectory %s has %d rollout rows, want %d: kept more than once", m.Step, id, n, want)
				}
			}
			if kept > pool {
				t.Errorf("step %d: %d draws, %d kept of a pool of %d", m.Step, draws, kept, pool)
			}
			t.Logf("step %d: %d draws, %d kept of a pool of %d", m.Step, draws, kept, pool)
		}
		// The target is the pool: a step that keeps all of it stops drawing, and one that falls short says so against the pool.
		if strings.Contains(log.String(), fmt.Sprintf("of %d trajectories with a non-zero advantage", o.Train.Trajectories)) {
			t.Errorf("the log counts train.trajectories, not the pool:\n%s", log.String())
		}
	})
	t.Run("budget spent", func(t *testing.T) {
		o := microOptions(t, filepath.Join(t.TempDir(), "out"))
		o.GRPO.DynamicSampling, o.GRPO.DynamicSamplingDraws, o.Train.Steps = true, 2, 1
		o.Rollout.Structured = false
		o.Rollout.MaxMemoryTokens, o.Rollout.MaxJudgeTokens = 1, 1 // nothing parses
		var log strings.Builder
		o.Progress = &log
		if _, err := Run(context.Background(), o); err != nil {
			t.Fatal(err)
		}
		m := readJSONL[Metrics](t, filepath.Join(o.Out, "metrics.jsonl"))[0]
		if *m.DynamicDraws != 3 || *m.DynamicKept != 0 || m.NonzeroAdvantages != 0 {
			t.Errorf("%d draws, %d kept, nonzero advantages %v; want 3, 0, 0", *m.DynamicDraws, *m.DynamicKept, m.NonzeroAdvantages)
		}
		if !strings.Contains(log.String(), "step 1: dynamic sampling kept 0 of 2 trajectories with a non-zero advantage after 2 extra draws") {
			t.Errorf("the log does not say the budget was spent:\n%s", log.String())
		}
		if rows := readJSONL[rolloutRow](t, filepath.Join(o.Out, "rollouts.jsonl")); len(rows) != o.Train.Trajectories*o.Rollout.GroupSize {
			t.Errorf("%d rollout rows, want the first draw's %d", len(rows), o.Train.Trajectories*o.Rollout.GroupSize)
		}
	})
}

// TestDynamicSamplingResumes: with dynamic sampling, a run interrupted after step 2 and resumed
// ends with the weights and metrics of an uninterrupted one.
func TestDynamicSamplingResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	base := t.TempDir()
	straight := microOptions(t, filepath.Join(base, "straight"))
	straight.GRPO.DynamicSampling, straight.Train.Trajectories, straight.Train.Steps = true, 3, 3
	if _, err := Run(context.Background(), straight); err != nil {
		t.Fatal(err)
	}
	o := straight
	o.Out = filepath.Join(base, "resumed")
	ctx, cancel := context.WithCancel(context.Background())
	o.Progress = &cancelAfter{n: "step 2/3", cancel: cancel}
	if res, err := Run(ctx, o); err != nil || res.Steps != 2 {
		t.Fatalf("interrupted run: %+v, %v", res, err)
	}
	o.Progress, o.Resume = nil, true
	if res, err := Run(context.Background(), o); err != nil || res.Steps != 3 {
		t.Fatalf("resumed run: %+v, %v", res, err)
	}
	a, b := weights(t, filepath.Join(straight.Out, "checkpoint-3")), weights(t, filepath.Join(o.Out, "checkpoint-3"))
	for name, x := range a {
		for i := range x {
			if x[i] != b[name][i] {
				t.Fatalf("%s[%d]: straight %v, resumed %v", name, i, x[i], b[name][i])
			}
		}
	}
	ma, mb := readJSONL[Metrics](t, filepath.Join(straight.Out, "metrics.jsonl")), readJSONL[Metrics](t, filepath.Join(o.Out, "metrics.jsonl"))
	if len(ma) != 3 || len(mb) != 3 {
		t.Fatalf("%d and %d metrics lines, want 3", len(ma), len(mb))
	}
	extra := 0
	for i := range ma {
		if ma[i].Loss != mb[i].Loss || *ma[i].DynamicDraws != *mb[i].DynamicDraws || *ma[i].DynamicKept != *mb[i].DynamicKept {
			t.Errorf("step %d: straight loss %v draws %d kept %d, resumed %v %d %d", i+1, ma[i].Loss, *ma[i].DynamicDraws, *ma[i].DynamicKept, mb[i].Loss, *mb[i].DynamicDraws, *mb[i].DynamicKept)
		}
		extra += *ma[i].DynamicDraws - 1
	}
	if extra == 0 {
		t.Error("no step drew more: the resume of extra draws is not exercised")
	}
}
