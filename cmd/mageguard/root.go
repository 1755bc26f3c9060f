package main

import (
	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
)

// globalFlags are the flags every command takes, and the configuration
// they resolve to.
type globalFlags struct {
	configFile string
	sets       []string
	cfg        *config.Config // resolved once before any command runs (PersistentPreRunE)
}

var global globalFlags

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "mageguard",
		Short: "Train and evaluate MAGE guard models (shadow memory + judge) for LLM agents",
		Long: `mageguard trains and evaluates MAGE guards: one Qwen3-class model that keeps a
security-focused shadow memory of an agent's trajectory (update_memory) and
approves or rejects each pending tool call from that memory (assess_risk).

Every command takes --config FILE (YAML, see configs/) and repeatable
--set key=value overrides with dotted keys (e.g. --set rewards.gamma=0.25).
Precedence: command flags > --set > --config file > built-in defaults.
eval, serve, mcp and model score/generate given --model CKPT start from the
settings CKPT was trained with (CKPT/mageguard.yaml), which --config and --set
override key by key. Relative paths in a config file are relative to its folder;
those on the command line and in --set to the working directory.
Every command checks the whole configuration before it starts: an unknown
key or a bad value is an error, even for a command that reads no section.
Which command reads which sections:
  train           model, rollout, rewards, grpo, train, eval (train.eval_every)
  sft             model, rollout, grpo, train, sft, eval (train.eval_every)
  eval            model, rollout, eval
  serve, mcp      model, rollout, serve
  sweep           all of them, for every point (sweep: the grid)
  model ...       model
  plan            model, rollout, grpo, train.max_turns
  config          prints them all
  data, tokenize  none (their flags say everything); data label: rollout (its server)
Data is written to stdout or files; logs and progress go to stderr.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Resolve and check the configuration once, for every command.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if skipConfig(cmd) {
				return nil
			}
			cfg, err := resolveConfig(cmd, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			global.cfg = cfg
			return nil
		},
	}
	global = globalFlags{}
	root.PersistentFlags().StringVar(&global.configFile, "config", "", "YAML config file (see configs/)")
	root.PersistentFlags().StringArrayVar(&global.sets, "set", nil, "override a config key: --set section.key=value (repeatable)")
	root.PersistentFlags().BoolP("verbose", "v", false, "also log what libraries print (the go backend's parallelism line)")
	root.AddCommand(
		newConfigCmd(),
		newDataCmd(),
		newTokenizeCmd(),
		newModelCmd(),
		newTrainCmd(),
		newSFTCmd(),
		newPlanCmd(),
		newEvalCmd(),
		newSweepCmd(),
		newServeCmd(),
		newMCPCmd(),
		newLabelCmd(),
	)
	root.SetFlagErrorFunc(flagError)
	withChecks(root)
	return root
}

// loadConfig returns the configuration resolved from --config and --set
// (checked before the command ran); commands then apply their own flags on
// top (flags > --set > file > defaults).
func loadConfig() (*config.Config, error) {
	if global.cfg != nil {
		return global.cfg, nil
	}
	return config.Load(global.configFile, global.sets)
}

// skipConfig reports whether cmd is cobra's own machinery (help, shell
// completion), which runs no mageguard code and reads no configuration.
func skipConfig(cmd *cobra.Command) bool {
	for c := cmd; c != nil; c = c.Parent() {
		switch c.Name() {
		case "help", "completion", cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
			return true
		}
	}
	return false
}

func newConfigCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Print the fully resolved configuration (defaults < --config < --set) as YAML",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			out, err := config.Marshal(cfg)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
}
