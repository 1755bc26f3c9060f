package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/openaichat"
)

// newDataImportOpenAICmd wires `data import openai` to dataset/openaichat.
func newDataImportOpenAICmd() *cobra.Command {
	var in, out, unlabeled string
	var o openaichat.Options
	cmd := &cobra.Command{
		Use:   "openai --in FILE --out FILE [--unlabeled skip|benign]",
		Short: "Import agent conversations in OpenAI's chat format",
		Long: `Convert agent conversations in OpenAI's chat format, one a line:
{"id"?, "messages": [...], "tools"?, "labels"?: {"<tool_call_id>": 0 | 1}},
into trajectories (docs/data.md, "OpenAI chat import"). Every tool call of an
assistant message is one action, in the listed order; its observation is
the tool message with its tool_call_id, wherever it stands; the first user
message is the user prompt and a later one goes with the next action;
arguments keep their key order and number spelling.

Labels: in a conversation with a labels object, the calls it names get its
label (label_source human) and the others 0 (assumed). A conversation
without one follows --unlabeled: skip leaves it out, benign labels every
action 0 (assumed). guard is refused: a chat log holds no guard decision.
A conversation with a label-1 action gets injection_task_id and
attack_type "unknown". Errors name the line, the message index and the
field.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if in == "" || out == "" {
				return fmt.Errorf("data import openai: --in and --out are required")
			}
			var err error
			if o.Unlabeled, err = openaichat.ParseUnlabeled(unlabeled); err != nil {
				return fmt.Errorf("data import openai: %w", err)
			}
			w, err := dataset.Create(out)
			if err != nil {
				return err
			}
			defer w.Abort()
			o.Emit = w.Write
			sum, err := openaichat.ImportFile(in, o)
			if err != nil {
				return err
			}
			if err := w.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "import: wrote %s: %d trajectories of %d conversations (%d skipped: no labels), %d actions, %d labeled 1\n",
				out, sum.Trajectories, sum.Conversations, sum.Skipped, sum.Actions, sum.Positives)
			return nil
		},
	}
	cmd.Flags().StringVar(&in, "in", "", "conversations, one JSON object a line (required)")
	cmd.Flags().StringVar(&out, "out", "", "output file, .jsonl or .parquet (required)")
	cmd.Flags().StringVar(&unlabeled, "unlabeled", "skip", "a conversation without labels: skip (leave it out) or benign (every action 0, label_source assumed)")
	cmd.Flags().StringVar(&o.Suite, "suite", "openai", "the trajectories' suite")
	cmd.Flags().StringVar(&o.Model, "model", "unknown", "the trajectories' agent model (chat logs do not name it)")
	return cmd
}
