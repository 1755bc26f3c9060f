package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/sessions"
	"github.com/mageguard/mageguard/serve/store"
)

// newDataImportSessionsCmd wires `data import sessions` to dataset/sessions.
func newDataImportSessionsCmd() *cobra.Command {
	var state, out, unlabeled string
	var o sessions.Options
	cmd := &cobra.Command{
		Use:   "sessions --state DIR --out FILE [--unlabeled skip|benign|guard]",
		Short: "Import the guard's own sessions (serve's or mcp's state) as labeled trajectories",
		Long: `Convert every session stored in DIR/sessions.db, the state directory of
mageguard serve or mageguard mcp, into one trajectory (docs/data.md, "Your
own traffic"): the user prompt, every action with its tool name and
arguments as the agent sent them, the user messages before it, and its
observation (the observation sent with the next step, which the guard
read; for the last action its recorded result; "" when no one recorded
it). A session with no steps is left out. A text
the server cut when it stored it holds the marker "[... N bytes elided
...]" where it was cut.

An action's label is its operator's label (mageguard label, or POST
/v1/sessions/{id}/steps/{n}/label): label_source human, the note in
label_note. An unlabeled action follows --unlabeled: skip leaves out its
session's trajectory, benign labels it 0 (assumed), guard takes the
guard's decision (block: 1) with label_source guard. A trajectory with a
label-1 action gets injection_task_id and attack_type "unknown". Ids are
SOURCE:SESSION_ID (serve:s_…, mcp:s_…).

The state is opened read-only; a running server holds it locked: stop it
first, or import a copy of DIR/sessions.db taken while it is stopped.`,
		Example: `  mageguard data import sessions --state runs/mcp --out data/own.jsonl --unlabeled guard`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if state == "" || out == "" {
				return fmt.Errorf("data import sessions: --state and --out are required")
			}
			var err error
			if o.Unlabeled, err = sessions.ParseUnlabeled(unlabeled); err != nil {
				return fmt.Errorf("data import sessions: %w", err)
			}
			if o.Source == "" {
				o.Source = "serve"
				if _, err := os.Stat(filepath.Join(state, "audit.jsonl")); err == nil {
					o.Source = "mcp"
				}
			}
			if _, err := os.Stat(filepath.Join(state, store.DBFile)); err != nil {
				return fmt.Errorf("data import sessions: %w", err)
			}
			st, err := store.Open(state, store.Options{LockWait: time.Second, ReadOnly: true})
			if err != nil {
				return fmt.Errorf("data import sessions: %w (a running mageguard serve or mcp holds its state: stop it first)", err)
			}
			defer st.Close()
			w, err := dataset.Create(out)
			if err != nil {
				return err
			}
			defer w.Abort()
			o.Emit = w.Write
			sum, err := sessions.Import(st, o)
			if err != nil {
				return fmt.Errorf("data import sessions: %s: %w", st.Path(), err)
			}
			if err := w.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "import: wrote %s: %d trajectories of %d sessions (%d skipped: unlabeled actions), %d actions (%d labeled by an operator, %d labeled 1, %d without a recorded result), %d empty sessions left out\n",
				out, sum.Trajectories, sum.Sessions, sum.Skipped, sum.Actions, sum.Human, sum.Positives, sum.NoResult, sum.Empty)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&state, "state", "", "state directory of mageguard serve or mcp (DIR/sessions.db; required)")
	fl.StringVar(&out, "out", "", "output file, .jsonl or .parquet (required)")
	fl.StringVar(&unlabeled, "unlabeled", "skip", "an action without an operator's label: skip (leave out its session), benign (0, assumed) or guard (the guard's decision)")
	fl.StringVar(&o.Source, "source", "", "serve or mcp: the trajectories' source and id prefix (default: mcp when DIR holds audit.jsonl, else serve)")
	fl.StringVar(&o.Model, "model", "unknown", "the trajectories' agent model (a session does not name it)")
	return cmd
}
