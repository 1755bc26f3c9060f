package grpo

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/mageguard/mageguard/model"
)

// TestTokenTermsFollowTheFormulas runs two iterations (μ = 2) of every loss and correction on
// the tiny model, in micro-batches of 3, with the trainer recording each token's terms: every
// ℓ_k the trainer reports equals the twin's from the reported log π_θ and the batch's π_old,
// π_ref and π_rollout, and each step's loss equals Σ_b weight_b Σ_k m ℓ_k of its own terms.
func TestTokenTermsFollowTheFormulas(t *testing.T) {
	for ci, c := range objectiveCases {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.config()
			cfg.LearningRate, cfg.WarmupSteps, cfg.NumIterations, cfg.MicroBatchSize = 0.05, 0, 2, 3
			rng := rand.New(rand.NewPCG(13, uint64(ci)))
			ctx := context.New()
			tinyInit(ctx, 4)
			tr, err := NewTrainer(backend(t), ctx, tinyPolicy, cfg, 0)
			if err != nil {
				t.Fatal(err)
			}
			tr.SetRecordTokens(true)
			b := randomBatch(rng, 8)
			logp, err := tr.LogProbs(ctx, b)
			if err != nil {
				t.Fatal(err)
			}
			b.RolloutLogProbs = perturb(rng, logp, b.LossMask, 0.3)
			for i := range b.RolloutLogProbs { // log-probs are ≤ 0
				for k, v := range b.RolloutLogProbs[i] {
					b.RolloutLogProbs[i][k] = min(v, 0)
				}
			}
			if c.withRef {
				b.RefLogProbs = perturb(rng, logp, b.LossMask, 0.1)
			}
			stats, err := tr.Update(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(stats) != 2 {
				t.Fatalf("%d iterations, want 2", len(stats))
			}
			for it, st := range stats {
				tt := st.Terms
				if tt == nil {
					t.Fatal("no token terms recorded")
				}
				in := twinInputsOf(cfg, b, tt.LogP)
				if cfg.Corrects() {
					in.rollout = to64(b.RolloutLogProbs)
				}
				want := twinObjective(cfg, in)
				fromTerms, tokens := 0.0, 0.0
				for i := range tt.LossTerm {
					rowSum := 0.0
					for k, m := range b.LossMask[i] {
						if m == 0 {
							continue
						}
						tokens++
						rowSum += float64(tt.LossTerm[i][k])
						if d := math.Abs(float64(tt.LossTerm[i][k]) - want.perToken[i][k]); d > 1e-5*math.Max(1, math.Abs(want.perToken[i][k])) {
							t.Errorf("iteration %d: ℓ[%d][%d] = %v, twin %v", it+1, i, k, tt.LossTerm[i][k], want.perToken[i][k])
						}
					}
					fromTerms += tt.Weight[i] * rowSum
				}
				if math.Abs(st.Loss-fromTerms) > 1e-6 || math.Abs(st.Loss-want.loss) > 1e-5 {
					t.Errorf("iteration %d: loss %v, Σ weight Σ m ℓ %v, twin %v", it+1, st.Loss, fromTerms, want.loss)
				}
				if cfg.Corrects() {
					if d := math.Abs(st.RolloutWeightMean - sum(want.seqWeight)/tokens); d > 1e-5 {
						t.Errorf("iteration %d: mean weight %v, twin %v", it+1, st.RolloutWeightMean, sum(want.seqWeight)/tokens)
					}
					if d := math.Abs(st.RolloutKL - sum(want.seqRolloutKL)/tokens); d > 1e-5 || !(st.RolloutKL > 0) {
						t.Errorf("iteration %d: rollout KL %v, twin %v", it+1, st.RolloutKL, sum(want.seqRolloutKL)/tokens)
					}
				}
			}
			if math.Abs(stats[1].MeanRatio-1) < 1e-4 {
				t.Errorf("iteration 2: mean ratio %v: π_θ did not move from π_old, the ratio terms are not exercised", stats[1].MeanRatio)
			}
		})
	}
}

// TestCheckpointedLossesMatch: with activation checkpointing (and a shared prefix), GSPO with a
// sequence-level TIS and CISPO with a token-level MIS give the losses, the token terms, the
// correction's diagnostics and the weights of the whole graph, over two steps.
func TestCheckpointedLossesMatch(t *testing.T) {
	edits := map[string]func(*Config){
		"gspo, tis per sequence": func(c *Config) {
			c.Loss, c.RolloutCorrection, c.RolloutCorrectionLevel = LossGSPO, CorrectionTIS, LevelSequence
		},
		"cispo, mis per token": func(c *Config) {
			c.Loss, c.ClipEpsilonHigh, c.RolloutCorrection, c.RolloutCorrectionCap = LossCISPO, 4, CorrectionMIS, 1.2
		},
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			run := func(ckpt bool) ([]Stats, map[string][]float32) {
				mcfg := model.DefaultTinyConfig()
				mcfg.VocabSize, mcfg.BOSTokenID, mcfg.EOSTokenIDs = 1000, 0, []int{1}
				m, err := model.New(backend(t), &mcfg, 3, dtypes.Float32)
				if err != nil {
					t.Fatal(err)
				}
				cfg := DefaultConfig()
				cfg.LearningRate, cfg.WarmupSteps, cfg.Beta, cfg.MicroBatchSize = 1e-2, 0, 0.04, 4
				cfg.AdamEpsilon, cfg.GradientCheckpointing = 1, ckpt
				edit(&cfg)
				tr, err := NewTrainer(backend(t), m.Context(), func(ctx *context.Context, tokens, attn, pos *Node) *Node {
					return m.TokenLogProbs(ctx, tokens, attn, pos, 0.9)
				}, cfg, 0)
				if err != nil {
					t.Fatal(err)
				}
				tr.SetSharedPolicy(func(ctx *context.Context, prefix, prefixMask, tokens, attn, pos *Node) *Node {
					return m.TokenLogProbsShared(ctx, prefix, prefixMask, tokens, attn, pos, 0.9)
				})
				tr.SetStagedPolicy(modelStages(m, 0.9))
				tr.SetRecordTokens(true)
				rng := rand.New(rand.NewPCG(9, 9))
				b, err := NewBatch(guardLikeBatch(t, rng, mcfg.VocabSize))
				if err != nil {
					t.Fatal(err)
				}
				logp, err := tr.LogProbs(m.Context(), b)
				if err != nil {
					t.Fatal(err)
				}
				b.RefLogProbs = perturb(rng, logp, b.LossMask, 0.1)
				b.RolloutLogProbs = perturb(rng, logp, b.LossMask, 0.2)
				var stats []Stats
				for range 2 {
					st, err := tr.Step(b)
					if err != nil {
						t.Fatal(err)
					}
					stats = append(stats, st)
				}
				return stats, modelWeights(t, m.Context())
			}
			whole, wW := run(false)
			ckpt, wC := run(true)
			near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-5*math.Max(1, math.Abs(b)) }
			for i := range whole {
				a, c := whole[i], ckpt[i]
				if !near(c.Loss, a.Loss) || !near(c.RolloutWeightMean, a.RolloutWeightMean) || !near(c.RolloutKL, a.RolloutKL) ||
					c.RolloutMasked != a.RolloutMasked || !near(c.RolloutWeightMax, a.RolloutWeightMax) {
					t.Errorf("step %d: checkpointed %+v, whole %+v", i+1, c, a)
				}
				for r := range a.Terms.LossTerm {
					for k := range a.Terms.LossTerm[r] {
						if !near(float64(c.Terms.LossTerm[r][k]), float64(a.Terms.LossTerm[r][k])) {
							t.Fatalf("step %d: ℓ[%d][%d] checkpointed %v, whole %v", i+1, r, k, c.Terms.LossTerm[r][k], a.Terms.LossTerm[r][k])
						}
					}
				}
			}
			if !(whole[0].RolloutWeightMean > 0) || whole[0].RolloutWeightMean == 1 {
				t.Errorf("mean weight %v: the correction is not exercised", whole[0].RolloutWeightMean)
			}
			if d := maxWeightDiff(wW, wC); d > 1e-7 {
				t.Errorf("weights after 2 steps differ by %g", d)
			}
		})
	}
}
