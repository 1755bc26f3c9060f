package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/gomlx/gomlx/backends"
	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/model/backend"
	"github.com/mageguard/mageguard/model/chat"
	"github.com/mageguard/mageguard/model/tokenizer"
)

func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model",
		Short: "Qwen3 checkpoints: init a random one, merge a LoRA adapter, score, generate, inspect",
		Long: `model works with Qwen3 checkpoints in the Hugging Face layout (config.json,
model.safetensors or shards with model.safetensors.index.json, tokenizer files)
and LoRA adapter directories in PEFT's format (adapter_config.json,
adapter_model.safetensors), which every --model loads onto their base.
The model section of the configuration picks the backend (model.backend: go or
xla, model.plugin, model.parallelism) and the in-memory dtype (model.dtype).`,
	}
	cmd.AddCommand(newModelInitCmd(), newModelPretrainCmd(), newModelConvertCmd(), newModelMergeCmd(), newModelScoreCmd(), newModelGenerateCmd(), newModelInspectCmd(), newModelBenchCmd())
	return cmd
}

// checkpointSettings returns the model section with model.path set to dir
// (when given): the checkpoint a model command works on.
func checkpointSettings(cfg *config.Config, dir string) (model.Settings, error) {
	s := cfg.Model
	if dir != "" {
		s.Path = dir
	}
	if s.Path == "" {
		return s, errors.New("no checkpoint: pass --model DIR or set model.path")
	}
	return s, nil
}

// newBackend builds the backend b describes after applying the process-wide
// settings it asks for (b.ProcessSettings: the Go GC percent and memory
// limit, go-xla's downloads), which backend.New leaves to the program.
// Commands whose backend train builds apply them themselves first.
func newBackend(b backend.Config) (backends.Backend, error) {
	b.ProcessSettings().Apply()
	return backend.New(b)
}

// loadModel loads the checkpoint of s (model.Settings.LoadModel) on the
// backend s describes (newBackend), without a tokenizer.
func loadModel(s model.Settings) (*model.Model, error) {
	b, err := newBackend(s.BackendConfig)
	if err != nil {
		return nil, err
	}
	return s.LoadModel(b, nil)
}

func newModelInitCmd() *cobra.Command {
	var (
		out      string
		force    bool
		maxShard int64
	)
	cmd := &cobra.Command{
		Use:   "init --out DIR",
		Short: "Write a randomly initialized Qwen3 checkpoint (Hugging Face layout) with the tokenizer files",
		Long: `init writes a random Qwen3 checkpoint with the architecture keys of the model
section (configs/model-tiny.yaml: a CPU-sized model with the real Qwen3
vocabulary), seeded by model.seed, stored as model.dtype (float32 or
bfloat16), with the tokenizer files of model.tokenizer copied in. It runs on
the go backend whatever model.backend says (no accelerator is needed).

  mageguard model init --config configs/model-tiny.yaml --out runs/model-tiny
  mageguard model init --config configs/model-tiny.yaml --out runs/model-tiny-bf16 --set model.dtype=bfloat16 --set model.hidden_size=128
  mageguard model init --config configs/default.yaml --set model.num_hidden_layers=2 --out runs/qwen3-4b-2l`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if err := checkNewOut("model init", out, force); err != nil {
				return err
			}
			s := cfg.Model
			s.Path = "" // a random model from the architecture keys and model.seed
			// Drawing random weights and writing them is host work: always the
			// go backend, so a GPU config (configs/default.yaml) runs here too.
			s.BackendConfig = backend.Default()
			m, err := loadModel(s)
			if err != nil {
				return fmt.Errorf("model init: %w", err)
			}
			opts := model.SaveOptions{DType: cfg.Model.DType, MaxShardBytes: maxShard, TokenizerDir: cfg.Model.Tokenizer}
			if err := m.Save(out, opts); err != nil {
				return err
			}
			if err := writeSettings(out, cfg); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "model init: wrote %s: %d parameters, %s, %s\n",
				out, m.NumParameters(), cfg.Model.DType, cfg.Model.Config.String())
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "checkpoint directory to write")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite a non-empty --out")
	cmd.Flags().Int64Var(&maxShard, "max-shard-bytes", 0, "split the weights into shards above this size (0 = 5 GB, -1 = never)")
	return cmd
}

func newModelConvertCmd() *cobra.Command {
	var (
		dir, out, dtype, tok string
		maxShard             int64
	)
	cmd := &cobra.Command{
		Use:   "convert --model DIR --out DIR2",
		Short: "Load a checkpoint and save it again: another dtype, other shards, tokenizer files",
		Long: `convert loads a checkpoint (float32 in memory, or model.dtype) and writes it to
--out as --dtype (float32, bfloat16 or float16; default: model.dtype), in shards
above --max-shard-bytes, with the tokenizer files of --tokenizer (default: the
checkpoint's own, else model.tokenizer) copied in.

  mageguard model convert --model runs/model-tiny --out runs/model-tiny-sharded --dtype bfloat16 --max-shard-bytes 20000000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if out == "" {
				return errors.New("model convert: --out is required")
			}
			s, err := checkpointSettings(cfg, dir)
			if err != nil {
				return err
			}
			m, err := loadModel(s)
			if err != nil {
				return err
			}
			if tok == "" {
				tok = s.TokenizerDir()
			}
			if tok == "-" {
				tok = ""
			}
			if dtype == "" {
				dtype = cfg.Model.DType
			}
			if err := m.Save(out, model.SaveOptions{DType: dtype, MaxShardBytes: maxShard, TokenizerDir: tok}); err != nil {
				return err
			}
			if err := writeSettings(out, cfg); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "model convert: wrote %s as %s\n", out, dtype)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "model", "", "checkpoint directory to read (default: model.path)")
	cmd.Flags().StringVar(&out, "out", "", "checkpoint directory to write")
	cmd.Flags().StringVar(&dtype, "dtype", "", "stored dtype: float32, bfloat16 or float16 (default: model.dtype)")
	cmd.Flags().StringVar(&tok, "tokenizer", "", "tokenizer directory to copy (default: the checkpoint's, else model.tokenizer; \"-\" = none)")
	cmd.Flags().Int64Var(&maxShard, "max-shard-bytes", 0, "split the weights into shards above this size (0 = 5 GB, -1 = never)")
	return cmd
}

func newModelGenerateCmd() *cobra.Command {
	var (
		dir, prompt, tok string
		asChat, asJSON   bool
		opts             model.GenerateOptions
	)
	cmd := &cobra.Command{
		Use:   "generate --model DIR --prompt TEXT",
		Short: "Continue a prompt with a checkpoint (greedy by default) and print the text",
		Long: `generate encodes --prompt with the checkpoint's tokenizer (or model.tokenizer),
generates up to --max-new-tokens tokens, stopping at the checkpoint's
eos_token_id, and prints the new text on stdout (--json: ids and log-probs too).
With --chat the prompt is one user message in Qwen3's chat template, thinking off.

  mageguard model generate --model runs/model-tiny --prompt "Hello" --max-new-tokens 16 --temperature 0.8 --seed 1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			s, err := checkpointSettings(cfg, dir)
			if err != nil {
				return err
			}
			if tok == "" {
				tok = s.TokenizerDir()
			}
			tk, err := tokenizer.Load(tok)
			if err != nil {
				return err
			}
			backend, err := newBackend(s.BackendConfig)
			if err != nil {
				return err
			}
			m, err := s.LoadModel(backend, tk)
			if err != nil {
				return err
			}
			var ids []int
			if asChat {
				ids = chat.Encode(tk, []chat.Message{chat.NewMessage(chat.RoleUser, prompt)}, nil,
					chat.Options{AddGenerationPrompt: true})
			} else {
				ids = tk.Encode(prompt)
			}
			if len(ids) == 0 {
				return errors.New("model generate: --prompt encodes to no tokens")
			}
			opts.StopTokens = m.Config().EOSTokenIDs
			gens, err := m.Generate([][]int{ids}, opts)
			if err != nil {
				return err
			}
			g := gens[0]
			text := tk.Decode(g.Tokens, true)
			if !asJSON {
				_, err = fmt.Fprintln(cmd.OutOrStdout(), text)
				return err
			}
			data, err := json.Marshal(map[string]any{
				"prompt_ids": ids, "tokens": g.Tokens, "log_probs": g.LogProbs, "stopped": g.Stopped, "text": text,
			})
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(data))
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "model", "", "checkpoint directory (default: model.path)")
	cmd.Flags().StringVar(&prompt, "prompt", "", "prompt text (added tokens such as <|im_start|> are recognized)")
	cmd.Flags().StringVar(&tok, "tokenizer", "", "tokenizer directory (default: the checkpoint's, else model.tokenizer)")
	cmd.Flags().BoolVar(&asChat, "chat", false, "wrap the prompt as a user message of Qwen3's chat template (thinking off)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print prompt ids, tokens, log-probs and text as JSON")
	cmd.Flags().IntVar(&opts.MaxNewTokens, "max-new-tokens", 64, "tokens to generate at most")
	cmd.Flags().Float64Var(&opts.Temperature, "temperature", 0, "sampling temperature (0 = greedy)")
	cmd.Flags().IntVar(&opts.TopK, "top-k", 0, "sample among the k most likely tokens (0 = off)")
	cmd.Flags().Float64Var(&opts.TopP, "top-p", 0, "nucleus sampling mass (0 = off)")
	cmd.Flags().Uint64Var(&opts.Seed, "seed", 0, "sampling seed")
	return cmd
}

func newModelInspectCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "inspect --model DIR",
		Short: "Print a checkpoint's config, parameter count, stored dtypes and files as JSON (weights not read)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if dir == "" {
				dir = cfg.Model.Path
			}
			if dir == "" {
				return errors.New("model inspect: pass --model DIR or set model.path")
			}
			info, err := model.Inspect(dir)
			if err != nil {
				return err
			}
			data, err := json.MarshalIndent(info, "", "  ")
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), string(data))
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "model", "", "checkpoint directory (default: model.path)")
	return cmd
}

// checkNewOut checks a checkpoint-writing command's --out: given, and empty
// or absent unless --force.
func checkNewOut(name, out string, force bool) error {
	if out == "" {
		return fmt.Errorf("%s: --out is required", name)
	}
	if entries, err := os.ReadDir(out); err == nil && len(entries) > 0 && !force {
		return fmt.Errorf("%s: %s exists and is not empty (use --force to overwrite)", name, out)
	}
	return nil
}
