package train

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/tokenizer"
)

// TestCopySequences: a copying sequence is the start token and Length
// tokens of the pool, then the same tokens as its completion.
func TestCopySequences(t *testing.T) {
	pool := []int32{4, 7, 9}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range copySequences(rng, pool, 99, 5, 6) {
		if len(s.Prompt) != 7 || s.Prompt[0] != 99 || !slices.Equal(s.Prompt[1:], s.Completion) || s.Forced != nil {
			t.Fatalf("sequence %v | %v, want 99, six pool tokens, and the same six", s.Prompt, s.Completion)
		}
		for _, id := range s.Completion {
			if !slices.Contains(pool, id) {
				t.Fatalf("token %d is not in the pool %v", id, pool)
			}
		}
	}
}

// TestPretrainCopy: a random model starts knowing nothing of the copy
// (cross-entropy ≈ ln of the ids it draws from, the synth tokenizer's
// 1,605 that are not added tokens), and the run writes a checkpoint that
// loads and holds the tokenizer; 0 steps and a cancelled run write nothing.
func TestPretrainCopy(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	o := synthMicroOptions(t)
	o.Model.InitializerRange = 0.002 // near-uniform logits at the start
	out := filepath.Join(t.TempDir(), "copy")
	c := CopyConfig{Steps: 3, Batch: 4, Length: 8, Seed: 1}
	var losses []float64
	if err := PretrainCopy(context.Background(), o, c, out, func(s CopyStep) { losses = append(losses, s.Loss) }); err != nil {
		t.Fatal(err)
	}
	if len(losses) != 3 {
		t.Fatalf("%d steps reported, want 3", len(losses))
	}
	if want := math.Log(1605); math.Abs(losses[0]-want) > 0.05 {
		t.Errorf("first step's copy cross-entropy %.4f, want ≈ ln(1605) = %.4f", losses[0], want)
	}
	tok, err := tokenizer.Load(out)
	if err != nil {
		t.Fatalf("the checkpoint has no tokenizer: %v", err)
	}
	s := o.Model
	s.Path = out
	backend, err := model.NewBackend(s.BackendConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadModel(backend, tok); err != nil {
		t.Fatalf("the checkpoint does not load: %v", err)
	}
	if err := PretrainCopy(context.Background(), o, CopyConfig{Steps: 0, Batch: 1, Length: 1}, out, nil); err == nil {
		t.Error("0 steps: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	other := filepath.Join(t.TempDir(), "cancelled")
	if err := PretrainCopy(ctx, o, c, other, nil); err == nil {
		t.Error("a cancelled run: no error")
	}
	if _, err := tokenizer.Load(other); err == nil {
		t.Error("a cancelled run wrote a checkpoint")
	}
}
