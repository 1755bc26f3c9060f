package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/model/checkpoint"
)

// runsACheckpoint lists the commands that run a guard checkpoint given with
// --model: without --config they start from the settings it was trained
// with (checkpoint.SettingsFile), which --config and --set override key by
// key.
var runsACheckpoint = map[string]bool{
	"mageguard eval": true, "mageguard serve": true, "mageguard mcp": true,
	"mageguard model score": true, "mageguard model generate": true,
}

// resolveConfig loads the configuration cmd runs with: defaults, then the
// settings of the checkpoint its --model names (for runsACheckpoint), then
// --config, then --set; one line on log says which were used.
func resolveConfig(cmd *cobra.Command, log io.Writer) (*config.Config, error) {
	var files, used []string
	if f := cmd.Flags().Lookup("model"); f != nil && f.Changed {
		if err := checkRunDir(f.Value.String()); err != nil {
			return nil, err
		}
	}
	if f := cmd.Flags().Lookup("model"); f != nil && f.Changed && runsACheckpoint[cmd.CommandPath()] {
		saved := filepath.Join(f.Value.String(), checkpoint.SettingsFile)
		if _, err := os.Stat(saved); err == nil {
			files = append(files, saved)
			used = append(used, "the checkpoint's "+saved)
		} else if global.configFile == "" {
			used = append(used, "the defaults ("+f.Value.String()+" holds no "+checkpoint.SettingsFile+": give the --config it was trained with)")
		}
	}
	if global.configFile != "" {
		files = append(files, global.configFile)
		used = append(used, "--config "+global.configFile)
	}
	cfg, err := config.LoadFiles(files, global.sets)
	if err != nil {
		return nil, err
	}
	if len(used) > 0 && runsACheckpoint[cmd.CommandPath()] {
		if len(global.sets) > 0 {
			used = append(used, "--set "+strings.Join(global.sets, " "))
		}
		fmt.Fprintf(log, "settings: %s\n", strings.Join(used, ", then "))
	}
	return cfg, nil
}

// writeSettings records cfg in the checkpoint dir (checkpoint.SettingsFile),
// so that the commands that run it start from the settings it was made with.
func writeSettings(dir string, cfg *config.Config) error {
	data, err := config.Marshal(cfg)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, checkpoint.SettingsFile), data)
}
