package train_test

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/train"
)

// TestRecordDemoBatch writes the rollout batch of the demo's first step (configs/tiny.yaml:
// its sequences, target positions, advantages, phases and reference log-probs) to the file
// named by MAGEGUARD_RECORD_BATCH, as grpo's update benchmark reads it
// (grpo/testdata/demo_batch.json.gz). It is how that fixture was made; skipped otherwise:
//
//	MAGEGUARD_RECORD_BATCH=$PWD/grpo/testdata/demo_batch.json.gz go test -run TestRecordDemoBatch ./train
func TestRecordDemoBatch(t *testing.T) {
	path := os.Getenv("MAGEGUARD_RECORD_BATCH")
	if path == "" {
		t.Skip("MAGEGUARD_RECORD_BATCH not set")
	}
	if err := os.Chdir(".."); err != nil { // configs/tiny.yaml's paths are relative to the repository
		t.Fatal(err)
	}
	cfg, err := config.Load("configs/tiny.yaml", []string{"train.steps=1", "train.eval_every=0", "train.log_rollouts=false"})
	if err != nil {
		t.Fatal(err)
	}
	var rec grpo.RecordedBatch
	_, err = train.Run(context.Background(), train.Options{
		Model: cfg.Model, Rollout: cfg.Rollout, Rewards: cfg.Rewards, GRPO: cfg.GRPO, Train: cfg.Train,
		Out: filepath.Join(t.TempDir(), "run"),
		OnBatch: func(step int, b *grpo.Batch) {
			rec = grpo.Record(b, "configs/tiny.yaml step 1 (make demo's first batch)", cfg.Rollout.Temperature)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	if err := json.NewEncoder(zw).Encode(rec); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d sequences", path, len(rec.Sequences))
}
