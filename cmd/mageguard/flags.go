package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
)

// setFromFlag sets *dst to v when the flag name was given on the command
// line: a command's flags beat --set and the config file.
func setFromFlag[T any](cmd *cobra.Command, name string, dst *T, v T) {
	if cmd.Flags().Changed(name) {
		*dst = v
	}
}

// runFlags are the flags of the training commands (train, sft).
type runFlags struct {
	data, modelDir, out string
	resume              bool
}

// add registers the flags on cmd.
func (f *runFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.data, "data", "", "training trajectories (sets train.data)")
	fl.StringVar(&f.modelDir, "model", "", "starting checkpoint directory (sets model.path; default: a random model from model.*)")
	fl.StringVar(&f.out, "out", "", "output directory (required): checkpoints, metrics, curves")
	fl.BoolVar(&f.resume, "resume", false, "continue from the newest checkpoint in --out")
}

// config resolves the run's configuration (trainConfig) with --data and
// --model applied; the caller applies its own flags and validates it.
func (f *runFlags) config(cmd *cobra.Command) (*config.Config, error) {
	if f.out == "" {
		return nil, fmt.Errorf("%s: --out DIR is required (where the checkpoints and metrics go)", cmd.Name())
	}
	cfg, err := trainConfig(f.out, f.resume)
	if err != nil {
		return nil, err
	}
	setFromFlag(cmd, "data", &cfg.Train.Data, f.data)
	setFromFlag(cmd, "model", &cfg.Model.Path, f.modelDir)
	if err := checkTrajectoryFile("train.data (--data)", cfg.Train.Data); err != nil {
		return nil, err
	}
	return cfg, nil
}
