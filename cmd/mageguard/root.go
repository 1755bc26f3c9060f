package main

import (
	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
)

// globalFlags are the flags every command takes.
type globalFlags struct {
	configFile string
	sets       []string
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
Data is written to stdout or files; logs and progress go to stderr.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&global.configFile, "config", "", "YAML config file (see configs/)")
	root.PersistentFlags().StringArrayVar(&global.sets, "set", nil, "override a config key: --set section.key=value (repeatable)")
	root.AddCommand(
		newConfigCmd(),
		newDataCmd(),
		newTokenizeCmd(),
		newModelCmd(),
		newTrainCmd(),
		newEvalCmd(),
		newSweepCmd(),
	)
	return root
}

// loadConfig resolves the configuration from --config and --set; commands
// then apply their own flags on top (flags > --set > file > defaults).
func loadConfig() (*config.Config, error) {
	return config.Load(global.configFile, global.sets)
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
