package train

import (
	"context"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
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

// TestLookupSequences: a lookup sequence is the start token, marker A and
// 1–4 list tokens, marker B and 1–4 list tokens, then (without filler) the
// query marker, the query and the ask token; its one completion token is
// the marker of the list the query is in. With filler, the query still
// follows the query marker and appears exactly twice (the filler holds no
// list token), and both lists are asked about.
func TestLookupSequences(t *testing.T) {
	pool := make([]int32, 40)
	for i := range pool {
		pool[i] = int32(100 + i)
	}
	markA, markB, markQ, ask := pool[0], pool[1], pool[2], pool[3]
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range lookupSequences(rng, pool, 99, 100, 0) {
		p := s.Prompt
		ib, iq := slices.Index(p, markB), slices.Index(p, markQ)
		if p[0] != 99 || p[1] != markA || ib < 3 || ib > 6 || iq < ib+2 || iq > ib+5 || iq != len(p)-3 || p[len(p)-1] != ask || len(s.Completion) != 1 {
			t.Fatalf("sequence %v | %v: not start, A, 1-4 tokens, B, 1-4 tokens, query marker, query, ask", p, s.Completion)
		}
		a, b, q := p[2:ib], p[ib+1:iq], p[iq+1]
		lists := slices.Concat(a, b)
		slices.Sort(lists)
		if len(slices.Compact(lists)) != len(a)+len(b) {
			t.Fatalf("sequence %v: list tokens repeat", p)
		}
		want := markB
		if slices.Contains(a, q) {
			want = markA
		} else if !slices.Contains(b, q) {
			t.Fatalf("sequence %v: the query is in neither list", p)
		}
		if s.Completion[0] != want {
			t.Fatalf("sequence %v: answer %d, want %d", p, s.Completion[0], want)
		}
	}
	answers := map[int32]int{}
	for _, s := range lookupSequences(rng, pool, 99, 200, 6) {
		p := s.Prompt
		ib, iq := slices.Index(p, markB), slices.Index(p, markQ)
		q := p[iq+1]
		n := 0
		for _, id := range p {
			if id == q {
				n++
			}
		}
		want := markB
		if slices.Contains(p[2:ib], q) {
			want = markA
		}
		if n != 2 || s.Completion[0] != want || p[len(p)-1] != ask {
			t.Fatalf("sequence %v | %v: query %d appears %d times, answer want %d", p, s.Completion, q, n, want)
		}
		answers[want]++
	}
	if answers[markA] < 60 || answers[markB] < 60 {
		t.Errorf("answers %v: both lists should be asked about about half the time", answers)
	}
	if err := (CopyConfig{Task: "recall", Steps: 1, Batch: 1, Length: 1}).Validate(); err == nil || !strings.Contains(err.Error(), "--task") {
		t.Errorf("an unknown task: %v", err)
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
	if want := math.Log(1621); math.Abs(losses[0]-want) > 0.05 {
		t.Errorf("first step's copy cross-entropy %.4f, want ≈ ln(1621) = %.4f", losses[0], want)
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
