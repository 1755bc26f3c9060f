package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/model/checkpoint"
)

func newModelMergeCmd() *cobra.Command {
	var (
		adapter, out, dtype string
		maxShard            int64
		force               bool
	)
	cmd := &cobra.Command{
		Use:   "merge --adapter DIR --out DIR2",
		Short: "Fold a LoRA adapter into its base: a whole Hugging Face checkpoint with W + s·B·A",
		Long: `merge loads a LoRA adapter directory (PEFT's adapter_config.json and
adapter_model.safetensors, as train and sft write them with model.lora) onto its
base (base_model_name_or_path), adds s·B·A to every adapted weight in float32
(s = lora_alpha / r, or lora_alpha / √r with use_rslora; each element of B·A summed
in float64), and writes a whole checkpoint to --out as --dtype (float32, bfloat16
or float16; default: model.dtype) with the tokenizer files of the adapter (else
of its base). It runs on the go backend whatever model.backend says.

  mageguard model merge --adapter runs/lora/checkpoint-100 --out runs/guard-merged --dtype bfloat16`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if adapter == "" {
				return errors.New("model merge: --adapter is required")
			}
			if !checkpoint.IsAdapter(adapter) {
				return fmt.Errorf("model merge: %s has no %s: not an adapter directory", adapter, checkpoint.AdapterConfigFile)
			}
			if err := checkNewOut("model merge", out, force); err != nil {
				return err
			}
			s := cfg.Model
			s.Path, s.DType = adapter, "float32" // merged in float32, rounded once when saved
			s.BackendConfig = backend.Default()
			m, err := loadModel(s)
			if err != nil {
				return fmt.Errorf("model merge: %w", err)
			}
			lora, base := m.Adapter(), m.AdapterBase()
			if err := m.MergeAdapter(); err != nil {
				return fmt.Errorf("model merge: %w", err)
			}
			if dtype == "" {
				dtype = cfg.Model.DType
			}
			if err := m.Save(out, model.SaveOptions{DType: dtype, MaxShardBytes: maxShard, TokenizerDir: s.TokenizerDir()}); err != nil {
				return err
			}
			if err := writeMergedSettings(out, adapter, cfg); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "model merge: wrote %s as %s: %s of %s merged into %s\n", out, dtype, lora.String(), adapter, base)
			return nil
		},
	}
	cmd.Flags().StringVar(&adapter, "adapter", "", "LoRA adapter directory (adapter_config.json, adapter_model.safetensors)")
	cmd.Flags().StringVar(&out, "out", "", "checkpoint directory to write")
	cmd.Flags().StringVar(&dtype, "dtype", "", "stored dtype: float32, bfloat16 or float16 (default: model.dtype)")
	cmd.Flags().Int64Var(&maxShard, "max-shard-bytes", 0, "split the weights into shards above this size (0 = 5 GB, -1 = never)")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite a non-empty --out")
	return cmd
}

// writeMergedSettings records the settings of the adapter's training run
// (else cfg) in the merged checkpoint out, with no LoRA adapter to train.
func writeMergedSettings(out, adapter string, cfg *config.Config) error {
	if saved := filepath.Join(adapter, checkpoint.SettingsFile); fileExists(saved) {
		var err error
		if cfg, err = config.LoadFiles([]string{saved}, nil); err != nil {
			return fmt.Errorf("model merge: %w", err)
		}
	}
	merged := *cfg
	merged.Model.LoRA.Rank = 0
	merged.Model.Path = ""
	return writeSettings(out, &merged)
}

// fileExists reports whether path names a file.
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
