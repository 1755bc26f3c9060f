package bench

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/backend"
)

func tinyModel(t *testing.T) *model.Model {
	t.Helper()
	b, err := backend.New(backend.Default())
	if err != nil {
		t.Fatal(err)
	}
	c := model.DefaultTinyConfig()
	c.VocabSize, c.HiddenSize, c.IntermediateSize, c.NumHiddenLayers = 256, 32, 64, 1
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 2, 1, 16
	c.BOSTokenID, c.EOSTokenIDs = 0, []int{1}
	m, err := model.New(b, &c, 1, dtypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A benchmark step is a real optimizer step (finite loss, the weights
// move) on the shape asked for, and decoding runs every step.
func TestTrainStepAndDecodeRun(t *testing.T) {
	m := tinyModel(t)
	cfg := grpo.DefaultConfig()
	cfg.MicroBatchSize, cfg.LearningRate = 2, 1e-2
	ref, err := grpo.FrozenCopy(m.Context())
	if err != nil {
		t.Fatal(err)
	}
	s := TrainShape{Rows: 3, PrefixTokens: 20, RowTokens: 12, TargetTokens: 5}
	res, err := TrainStep(m, cfg, s, TrainOptions{Steps: 1, Reference: ref, Heap: true})
	if err != nil {
		t.Fatal(err)
	}
	if math.IsNaN(res.Loss) || res.Seconds <= 0 || res.FLOPs != TrainFLOPs(m.Config(), s) || s.Tokens() != 3*32 {
		t.Errorf("result %+v", res)
	}
	if res.HeapPeakBytes < res.HeapBaseBytes || res.HeapBaseBytes == 0 {
		t.Errorf("heap base %d, peak %d", res.HeapBaseBytes, res.HeapPeakBytes)
	}
	d, err := Decode(m, DecodeShape{Rows: 3, PrefixTokens: 40, PromptTokens: 48, NewTokens: 4}, 1, false)
	if err != nil {
		t.Fatal(err)
	}
	if !(d.StepSeconds > 0) || math.Abs(d.TokensPerSecond*d.StepSeconds-3) > 1e-9 {
		t.Errorf("decode %+v", d)
	}
	if _, err := TrainStep(m, cfg, TrainShape{Rows: 1, RowTokens: 4, TargetTokens: 4}, TrainOptions{Steps: 1, Reference: ref}); err == nil {
		t.Error("targets beyond the row: no error")
	}
}

// TrainFLOPs by hand for the tiny model: per layer 2·P FLOPs a token for
// the P = 32 + 2·16·32 + 16·32... products (2 × parameters of the layer's
// matrices and norms), attention 4·nq·D per (query, key), and the LM head
// 2·V·H a target; ×3 for the backward.
func TestTrainFLOPsByHand(t *testing.T) {
	c := tinyModel(t).Config()
	_, layer, _ := c.ParameterGroups() // 32 + 32·32 + 16·32·2 + 32·32 + 16 + 16 + 32 + 3·64·32 = 9312
	if layer != 9312 {
		t.Fatalf("layer parameters %d, want 9312", layer)
	}
	s := TrainShape{Rows: 2, PrefixTokens: 4, RowTokens: 6, TargetTokens: 3}
	attn := 4.0 * 2 * 16
	prefix := 2*9312*4 + attn*4*4
	rows := 2 * (2*9312*6 + attn*6*10)
	head := 2 * 3 * 2 * 256 * 32.0
	if got, want := TrainFLOPs(c, s), 3*(prefix+rows+head); got != want {
		t.Errorf("TrainFLOPs %v, want %v", got, want)
	}
}
