package main

import (
	"context"
	"os"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/rollout"
)

// evaluateHook returns train's periodic held-out eval (trainEvalHook in
// eval.go), logging to stderr.
func evaluateHook(cfg *config.Config) func(ctx context.Context, m *model.Model, guard *rollout.Guard, step int, dir string) (map[string]any, error) {
	return trainEvalHook(cfg, os.Stderr)
}
