// Command record-batch writes the rollout batch of `make demo`'s first
// step (configs/tiny.yaml: its sequences, target positions, advantages,
// phases and reference log-probs) as grpo's update benchmark reads it
// (grpo/testdata/demo_batch.json.gz). It is how that fixture was made; run
// it from the repository root:
//
//	go run ./scripts/record-batch grpo/testdata/demo_batch.json.gz
package main

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/train"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: record-batch FILE.json.gz")
		os.Exit(2)
	}
	if err := record(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "record-batch:", err)
		os.Exit(1)
	}
}

func record(path string) error {
	cfg, err := config.Load("configs/tiny.yaml", []string{"train.steps=1", "train.eval_every=0", "train.log_rollouts=false"})
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "record-batch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var rec grpo.RecordedBatch
	_, err = train.Run(context.Background(), train.Options{
		Model: cfg.Model, Rollout: cfg.Rollout, Rewards: cfg.Rewards, GRPO: cfg.GRPO, Train: cfg.Train,
		Out: filepath.Join(tmp, "run"),
		OnBatch: func(step int, b *grpo.Batch) {
			rec = grpo.Record(b, "configs/tiny.yaml step 1 (make demo's first batch)", cfg.Rollout.Temperature)
		},
	})
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(f)
	if err := json.NewEncoder(zw).Encode(rec); err != nil {
		f.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Printf("%s: %d sequences\n", path, len(rec.Sequences))
	return nil
}
