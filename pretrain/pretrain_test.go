package pretrain

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/model/tokenizer"
)

// TestCopySequences: a copying sequence is the start token and lo…hi
// tokens of the pool, then the same tokens as its completion, every length
// of the range drawn.
func TestCopySequences(t *testing.T) {
	pool := []int32{4, 7, 9}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, r := range [][2]int{{6, 6}, {2, 6}} {
		lengths := map[int]bool{}
		for _, s := range copySequences(rng, pool, 99, 200, r[0], r[1]) {
			n := len(s.Completion)
			if n < r[0] || n > r[1] || len(s.Prompt) != n+1 || s.Prompt[0] != 99 || !slices.Equal(s.Prompt[1:], s.Completion) || s.Forced != nil {
				t.Fatalf("sequence %v | %v, want 99, %d-%d pool tokens, and the same again", s.Prompt, s.Completion, r[0], r[1])
			}
			for _, id := range s.Completion {
				if !slices.Contains(pool, id) {
					t.Fatalf("token %d is not in the pool %v", id, pool)
				}
			}
			lengths[n] = true
		}
		if len(lengths) != r[1]-r[0]+1 {
			t.Errorf("lengths %d-%d: drew %d of them", r[0], r[1], len(lengths))
		}
	}
}

// TestRecallSequences: a recall sequence is the start token and 2…pairs
// (key, value) pairs with distinct keys, then every key again, each
// followed by its value; the keys are forced (no loss), the values not.
func TestRecallSequences(t *testing.T) {
	pool := make([]int32, 40)
	for i := range pool {
		pool[i] = int32(100 + i)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := map[int]bool{}
	for _, s := range recallSequences(rng, pool, 99, 200, 5) {
		p, c := s.Prompt, s.Completion
		m := (len(p) - 1) / 2
		if p[0] != 99 || len(p) != 2*m+1 || m < 2 || m > 5 || len(c) != 2*m || len(s.Forced) != len(c) {
			t.Fatalf("sequence %v | %v: not start and 2-5 pairs, then as many pairs", p, c)
		}
		sizes[m] = true
		value := map[int32]int32{}
		for k := 1; k < len(p); k += 2 {
			if _, seen := value[p[k]]; seen {
				t.Fatalf("sequence %v: key %d twice", p, p[k])
			}
			value[p[k]] = p[k+1]
		}
		asked := map[int32]bool{}
		for k := 0; k < len(c); k += 2 {
			v, ok := value[c[k]]
			if !ok || c[k+1] != v || asked[c[k]] || !s.Forced[k] || s.Forced[k+1] {
				t.Fatalf("sequence %v | %v (forced %v): each key once with its value, the keys forced", p, c, s.Forced)
			}
			asked[c[k]] = true
		}
	}
	if len(sizes) != 4 {
		t.Errorf("drew %d of the 4 sizes 2-5", len(sizes))
	}
}

// microSettings are a one-layer Qwen3 of hidden size 8 on the synth
// tokenizer (as train's SFT tests use), and grpo's optimizer settings.
func microSettings() (model.Settings, grpo.Config) {
	ms := model.DefaultSettings()
	ms.Tokenizer = "../assets/synth-tokenizer"
	ms.VocabSize, ms.BOSTokenID, ms.EOSTokenIDs = 1645, 1619, []int{1621}
	ms.HiddenSize, ms.IntermediateSize, ms.NumHiddenLayers = 8, 16, 1
	ms.NumAttentionHeads, ms.NumKeyValueHeads, ms.HeadDim = 1, 1, 8
	ms.MaxPositionEmbeddings = 1024
	ms.Seed = 3
	g := grpo.DefaultConfig()
	g.LearningRate, g.WarmupSteps, g.Beta = 0.01, 0, 0.04 // beta and num_iterations do not apply
	g.NumIterations = 2
	return ms, g
}

// TestPretrainCopy: a random model starts knowing nothing of the copy
// (cross-entropy ≈ ln of the ids it draws from, the synth tokenizer's
// 1,619 that are not added tokens), and the run writes a checkpoint that
// loads and holds the tokenizer; 0 steps and a cancelled run write nothing.
func TestPretrainCopy(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	ms, g := microSettings()
	ms.InitializerRange = 0.002 // near-uniform logits at the start
	out := filepath.Join(t.TempDir(), "copy")
	c := Config{Steps: 3, FixedSteps: 2, Batch: 4, Length: 8, Seed: 1}
	var losses []float64
	if err := Run(context.Background(), ms, g, c, out, func(s Step) { losses = append(losses, s.Loss) }); err != nil {
		t.Fatal(err)
	}
	if len(losses) != 3 {
		t.Fatalf("%d steps reported, want 3", len(losses))
	}
	if want := math.Log(1619); math.Abs(losses[0]-want) > 0.05 {
		t.Errorf("first step's copy cross-entropy %.4f, want ≈ ln(1619) = %.4f", losses[0], want)
	}
	tok, err := tokenizer.Load(out)
	if err != nil {
		t.Fatalf("the checkpoint has no tokenizer: %v", err)
	}
	s := ms
	s.Path = out
	b, err := backend.New(s.BackendConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadModel(b, tok); err != nil {
		t.Fatalf("the checkpoint does not load: %v", err)
	}
	for _, bad := range []Config{{Steps: 0, Batch: 1, Length: 2}, {Steps: 1, Batch: 1, Length: 1}, {Task: "lookup", Steps: 1, Batch: 1, Length: 2}} {
		if err := Run(context.Background(), ms, g, bad, out, nil); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	other := filepath.Join(t.TempDir(), "cancelled")
	if err := Run(ctx, ms, g, c, other, nil); err == nil {
		t.Error("a cancelled run: no error")
	}
	if _, err := tokenizer.Load(other); err == nil {
		t.Error("a cancelled run wrote a checkpoint")
	}
}
