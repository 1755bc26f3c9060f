package model

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// testConfig is a small architecture whose random weights (std 0.2) give
// logits with clear top-2 margins.
func testConfig() *Config {
	return &Config{
		VocabSize: 256, HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 8, RMSNormEps: 1e-6, RopeTheta: 10000,
		MaxPositionEmbeddings: 512, InitializerRange: 0.2, BOSTokenID: 1, EOSTokenIDs: []int{2},
	}
}

func newTestModel(t testing.TB, cfg *Config, seed int64) *Model {
	t.Helper()
	m, err := New(testBackend(t), cfg, seed, dtypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func randomSeqs(rng *rand.Rand, vocab int, lengths ...int) [][]int {
	seqs := make([][]int, len(lengths))
	for i, n := range lengths {
		for j := 0; j < n; j++ {
			seqs[i] = append(seqs[i], rng.IntN(vocab))
		}
	}
	return seqs
}

// fullLogProbs runs the plain forward (no cache) on each sequence alone and
// returns log_softmax(logits / temperature) at every position, in float64.
func fullLogProbs(t *testing.T, m *Model, seq []int, temperature float64) [][]float64 {
	t.Helper()
	ids := make([][]int32, 1)
	mask := make([][]int32, 1)
	for _, id := range seq {
		ids[0] = append(ids[0], int32(id))
		mask[0] = append(mask[0], 1)
	}
	e, err := m.logitsExec()
	if err != nil {
		t.Fatal(err)
	}
	res, err := execRecover(e, ids, mask)
	if err != nil {
		t.Fatal(err)
	}
	flat := tensors.MustCopyFlatData[float32](res[0])
	V := m.cfg.VocabSize
	out := make([][]float64, len(seq))
	for p := range seq {
		row := make([]float32, V)
		for j := range row {
			row[j] = float32(float64(flat[p*V+j]) / temperature)
		}
		lse := logSumExp64(row)
		out[p] = make([]float64, V)
		for j, z := range row {
			out[p][j] = float64(z) - lse
		}
	}
	return out
}

// TestKVCacheMatchesFullForward checks that the log-probs every decode step
// samples from (prefill + cached steps, batched rows of different lengths)
// equal a full forward pass over prompt + generated tokens (whose LM head
// takes the whole vocabulary at once), within 1e-5, with generation's LM
// head over the whole vocabulary and over chunks of 1000.
func TestKVCacheMatchesFullForward(t *testing.T) {
	cfg := testConfig()
	cfg.VocabSize = 6000 // batch 4 × 6000 logits: more than one block of the vocabulary
	for _, chunk := range []int{0, 1000} {
		m := newTestModel(t, cfg, 1)
		m.SetLMHeadChunk(chunk)
		m.generationChunkBytes = 1 // chunks at every batch size
		testKVCache(t, m, chunk)
	}
}

func testKVCache(t *testing.T, m *Model, chunk int) {
	rng := rand.New(rand.NewPCG(7, 7))
	prompts := randomSeqs(rng, m.cfg.VocabSize, 5, 13, 1)
	for _, temp := range []float64{0, 0.8} {
		steps := map[[2]int][]float32{}
		opts := GenerateOptions{MaxNewTokens: 20, Temperature: temp, Seed: 3}
		opts.observe = func(row, step int, lp []float32) { steps[[2]int{row, step}] = append([]float32(nil), lp...) }
		gens, err := m.Generate(prompts, opts)
		if err != nil {
			t.Fatal(err)
		}
		T := temp
		if T == 0 {
			T = 1
		}
		worst := 0.0
		for i, g := range gens {
			if len(g.Tokens) != opts.MaxNewTokens {
				t.Fatalf("row %d: %d tokens, want %d", i, len(g.Tokens), opts.MaxNewTokens)
			}
			full := fullLogProbs(t, m, append(append([]int(nil), prompts[i]...), g.Tokens...), T)
			for s := range g.Tokens {
				lp, ok := steps[[2]int{i, s}]
				if !ok {
					t.Fatalf("row %d step %d not observed", i, s)
				}
				ref := full[len(prompts[i])-1+s]
				for j := range lp {
					worst = math.Max(worst, math.Abs(float64(lp[j])-ref[j]))
				}
				if d := math.Abs(float64(g.LogProbs[s]) - ref[g.Tokens[s]]); d > 1e-5 {
					t.Errorf("T=%g row %d step %d: reported log-prob off by %g", temp, i, s, d)
				}
			}
		}
		if worst > 1e-5 {
			t.Errorf("chunk %d T=%g: max |cached - full| log-prob = %g > 1e-5", chunk, temp, worst)
		}
		t.Logf("chunk %d T=%g: max |cached - full| log-prob = %.3g", chunk, temp, worst)
	}
}

// TestPaddedBatchEqualsRows checks that a right-padded batch gives each row
// the logits and the greedy continuation it gets alone.
func TestPaddedBatchEqualsRows(t *testing.T) {
	m := newTestModel(t, testConfig(), 2)
	rng := rand.New(rand.NewPCG(8, 8))
	seqs := randomSeqs(rng, m.cfg.VocabSize, 9, 3, 17, 6, 1)
	opts := ScoreOptions{MaxNewTokens: 6, NLastLogits: 100}
	batch, err := m.Score(seqs, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		alone, err := m.Score([][]int{s}, opts)
		if err != nil {
			t.Fatal(err)
		}
		a, b := alone[0], batch[i]
		if !slices.Equal(a.GreedyNewTokens, b.GreedyNewTokens) {
			t.Errorf("row %d: batched greedy %v, alone %v", i, b.GreedyNewTokens, a.GreedyNewTokens)
		}
		worst := 0.0
		for p := range a.LastLogits {
			for j := range a.LastLogits[p] {
				worst = math.Max(worst, math.Abs(float64(a.LastLogits[p][j]-b.LastLogits[p][j])))
			}
		}
		for k := range a.GreedyLogprobs {
			worst = math.Max(worst, math.Abs(a.GreedyLogprobs[k]-b.GreedyLogprobs[k]))
		}
		if worst > 1e-5 {
			t.Errorf("row %d: max |batched - alone| = %g > 1e-5", i, worst)
		}
	}
}

// TestTokenLogProbs checks the training graph function against the
// reference case's next-token log-probs (temperature 1) and against
// log_softmax(logits / T) of the full forward for T = 0.7, and the entropy
// against -Σ p log p computed on the host.
func TestTokenLogProbs(t *testing.T) {
	m, err := Load(testBackend(t), "testdata/p2_untied_bf16_sharded/ckpt")
	if err != nil {
		t.Fatal(err)
	}
	ref := readExpected(t, "testdata/p2_untied_bf16_sharded/expected.json")
	in := readInputs(t, "testdata/p2_untied_bf16_sharded/inputs.json")
	B, L, K := len(in.Sequences), 0, 0
	for _, s := range in.Sequences {
		L = max(L, len(s))
	}
	K = L - 1
	tokens := make([][]int32, B)
	mask := make([][]int32, B)
	target := make([][]int32, B)
	for b, s := range in.Sequences {
		tokens[b], mask[b], target[b] = make([]int32, L), make([]int32, L), make([]int32, K)
		for j, id := range s {
			tokens[b][j], mask[b][j] = int32(id), 1
		}
		for k := range target[b] {
			target[b][k] = int32(min(k+1, len(s)-1)) // padding entries repeat the last valid position
		}
	}
	for _, temp := range []float64{1, 0.7} {
		e := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, tok, msk, tgt *Node) (*Node, *Node) {
			return m.TokenLogProbsAndEntropy(ctx, tok, msk, tgt, temp)
		})
		res, err := e.Exec(tokens, mask, target)
		if err != nil {
			t.Fatal(err)
		}
		logp := tensors.MustCopyFlatData[float32](res[0])
		ent := tensors.MustCopyFlatData[float32](res[1])
		if got := res[0].Shape(); !got.Equal(shapes.Make(dtypes.Float32, B, K)) {
			t.Fatalf("shape %s, want [%d, %d] float32", got, B, K)
		}
		worst, worstH := 0.0, 0.0
		for b, s := range in.Sequences {
			full := fullLogProbs(t, m, s, temp)
			for k := 0; k < len(s)-1; k++ {
				want := full[k][s[k+1]]
				if temp == 1 {
					want = ref.Sequences[b].NextTokenLogprobs[k] // the independent reference
				}
				worst = math.Max(worst, math.Abs(float64(logp[b*K+k])-want))
				h := 0.0
				for _, lp := range full[k] {
					h -= math.Exp(lp) * lp
				}
				worstH = math.Max(worstH, math.Abs(float64(ent[b*K+k])-h))
			}
		}
		if worst > 1e-4 || worstH > 1e-4 {
			t.Errorf("T=%g: max |Δ log-prob| = %g, max |Δ entropy| = %g (want ≤ 1e-4)", temp, worst, worstH)
		}
	}
}

// TestGenerateLogProbsEqualTokenLogProbs checks that the log-probs reported
// with sampled tokens are what TokenLogProbs computes for them.
func TestGenerateLogProbsEqualTokenLogProbs(t *testing.T) {
	m := newTestModel(t, testConfig(), 3)
	rng := rand.New(rand.NewPCG(9, 9))
	prompts := randomSeqs(rng, m.cfg.VocabSize, 4, 11)
	const temp = 0.7
	gens, err := m.Generate(prompts, GenerateOptions{MaxNewTokens: 10, Temperature: temp, TopK: 50, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	L, K := 0, 10
	for i := range prompts {
		L = max(L, len(prompts[i])+len(gens[i].Tokens))
	}
	tokens := make([][]int32, len(prompts))
	mask := make([][]int32, len(prompts))
	target := make([][]int32, len(prompts))
	for b := range prompts {
		tokens[b], mask[b], target[b] = make([]int32, L), make([]int32, L), make([]int32, K)
		for j, id := range append(append([]int(nil), prompts[b]...), gens[b].Tokens...) {
			tokens[b][j], mask[b][j] = int32(id), 1
		}
		for k := range target[b] {
			target[b][k] = int32(len(prompts[b]) + k)
		}
	}
	e := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, tok, msk, tgt *Node) *Node {
		return m.TokenLogProbs(ctx, tok, msk, tgt, temp)
	})
	res, err := e.Exec(tokens, mask, target)
	if err != nil {
		t.Fatal(err)
	}
	logp := tensors.MustCopyFlatData[float32](res[0])
	for b := range prompts {
		for k := 0; k < K; k++ {
			if d := math.Abs(float64(logp[b*K+k] - gens[b].LogProbs[k])); d > 1e-5 {
				t.Errorf("row %d token %d: TokenLogProbs %g, Generate %g", b, k, logp[b*K+k], gens[b].LogProbs[k])
			}
		}
	}
}

// TestTrainingStepReducesLoss runs a few AdamW steps on the negative
// log-likelihood of fixed sequences through TokenLogProbs and checks that the
// loss goes down: every op of the model has a gradient on the pure-Go backend.
func TestTrainingStepReducesLoss(t *testing.T) {
	m := newTestModel(t, testConfig(), 4)
	tokens := [][]int32{{5, 17, 42, 99, 3, 8, 0, 0}, {7, 7, 120, 64, 200, 31, 250, 11}}
	mask := [][]int32{{1, 1, 1, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 1, 1, 1}}
	target := [][]int32{{1, 2, 3, 4, 5, 5, 5}, {1, 2, 3, 4, 5, 6, 7}}
	weights := [][]float32{{1, 1, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 1, 1}}
	opt := optimizers.Adam().LearningRate(1e-2).WeightDecay(0.01).Done()
	step := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, tok, msk, tgt, w *Node) *Node {
		logp := m.TokenLogProbs(ctx, tok, msk, tgt, 1)
		loss := Neg(Div(ReduceAllSum(Mul(logp, w)), ReduceAllSum(w)))
		opt.UpdateGraph(ctx, tok.Graph(), loss)
		return loss
	})
	var losses []float32
	for i := 0; i < 5; i++ {
		res, err := step.Exec(tokens, mask, target, weights)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, tensors.ToScalar[float32](res[0]))
	}
	if !(losses[4] < losses[0]-0.1) {
		t.Errorf("loss did not go down: %v", losses)
	}
	if math.Abs(float64(losses[0])-math.Log(256)) > 1.5 {
		t.Errorf("initial loss %g is far from log(vocab) = %g", losses[0], math.Log(256))
	}
}

// TestTokenLogProbsShared compares the shared-prefix log-probs, and the
// gradient of a weighted sum of them with respect to every weight, with
// TokenLogProbs on the concatenated sequences (rows of different lengths, a
// padded prefix, temperature 0.7).
func TestTokenLogProbsShared(t *testing.T) {
	m := newTestModel(t, testConfig(), 6)
	rng := rand.New(rand.NewPCG(10, 10))
	const n, P, L, K = 7, 10, 9, 4 // shared tokens, prefix bucket, own tokens bucket, targets per row
	shared := randomSeqs(rng, m.cfg.VocabSize, n)[0]
	own := randomSeqs(rng, m.cfg.VocabSize, 5, 9, 2)
	B := len(own)
	prefix, prefixMask := [][]int32{make([]int32, P)}, [][]int32{make([]int32, P)}
	for j, id := range shared {
		prefix[0][j], prefixMask[0][j] = int32(id), 1
	}
	tokens, mask := make([][]int32, B), make([][]int32, B)        // own tokens
	whole, wholeMask := make([][]int32, B), make([][]int32, B)    // prefix ++ own tokens
	target, wholeTarget := make([][]int32, B), make([][]int32, B) // positions in own / whole
	weights := make([][]float32, B)
	for b, seq := range own {
		tokens[b], mask[b] = make([]int32, L), make([]int32, L)
		whole[b], wholeMask[b] = make([]int32, n+L), make([]int32, n+L)
		for j, id := range shared {
			whole[b][j], wholeMask[b][j] = int32(id), 1
		}
		for j, id := range seq {
			tokens[b][j], mask[b][j] = int32(id), 1
			whole[b][n+j], wholeMask[b][n+j] = int32(id), 1
		}
		for k := 0; k < K; k++ {
			p := min(1+k, len(seq)-1) // targets 1…len-1, the last one repeated as padding
			target[b] = append(target[b], int32(p))
			wholeTarget[b] = append(wholeTarget[b], int32(n+p))
			weights[b] = append(weights[b], float32(rng.NormFloat64()))
		}
	}
	var names []string
	for v := range m.Context().IterVariables() {
		names = append(names, v.ScopeAndName())
	}
	gradients := func(g *Graph, logp, w *Node) []*Node {
		var values []*Node
		for v := range m.Context().IterVariables() {
			values = append(values, v.ValueGraph(g))
		}
		return append([]*Node{logp}, Gradient(ReduceAllSum(Mul(logp, w)), values...)...)
	}
	sharedExec := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, in []*Node) []*Node {
		return gradients(in[0].Graph(), m.TokenLogProbsShared(ctx, in[0], in[1], in[2], in[3], in[4], 0.7), in[5])
	})
	plainExec := context.MustNewExec(m.Backend(), m.Context(), func(ctx *context.Context, in []*Node) []*Node {
		return gradients(in[0].Graph(), m.TokenLogProbs(ctx, in[0], in[1], in[2], 0.7), in[3])
	})
	got, err := sharedExec.Exec(prefix, prefixMask, tokens, mask, target, weights)
	if err != nil {
		t.Fatal(err)
	}
	want, err := plainExec.Exec(whole, wholeMask, wholeTarget, weights)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		a, b := tensors.MustCopyFlatData[float32](got[i]), tensors.MustCopyFlatData[float32](want[i])
		scale, worst := 1.0, 0.0
		for j := range b {
			scale = math.Max(scale, math.Abs(float64(b[j])))
			worst = math.Max(worst, math.Abs(float64(a[j]-b[j])))
		}
		what := "log-probs"
		if i > 0 {
			what = "gradient of " + names[i-1]
		}
		if worst > 1e-5*scale {
			t.Errorf("%s: max |shared - plain| = %g (scale %g)", what, worst, scale)
		}
		if i == 0 {
			t.Logf("log-probs: max |shared - plain| = %.3g", worst)
		}
	}
}
