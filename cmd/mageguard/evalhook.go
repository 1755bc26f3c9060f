package main

import (
	"context"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/rollout"
)

// evaluateHook returns train's periodic held-out eval, or nil until eval
// is wired.
func evaluateHook(cfg *config.Config) func(ctx context.Context, m *model.Model, guard *rollout.Guard, step int, dir string) (map[string]any, error) {
	return nil
}
