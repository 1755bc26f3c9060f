package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/serve"
	"github.com/mageguard/mageguard/serve/store"
)

// newLabelCmd is `mageguard label`: an operator's label on a stored step,
// written to the state directory directly (no server running).
func newLabelCmd() *cobra.Command {
	var (
		state, session, note, by string
		step, label              int
	)
	cmd := &cobra.Command{
		Use:   "label --state DIR --session ID --step N --label 0|1 [--note TEXT] [--by NAME]",
		Short: "Label a stored step as malicious (1) or benign (0), as POST /v1/sessions/{id}/steps/{n}/label does",
		Long: `label writes an operator's label on step N (from 0, as GET /v1/sessions/{id}
shows the steps) of session ID in DIR/sessions.db, the state directory of
mageguard serve or mageguard mcp, with the time and --by (default: $USER).
The last label given stands. It is refused while a server holds the state:
label through the server's API then (docs/serving.md).`,
		Example: `  mageguard label --state runs/serve --session s_abc… --step 2 --label 1 --note "an IBAN from the bill"`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case state == "":
				return errors.New("label: --state DIR is required")
			case session == "":
				return errors.New("label: --session ID is required")
			case !cmd.Flags().Changed("step") || step < 0:
				return errors.New("label: --step N (from 0) is required")
			case !cmd.Flags().Changed("label") || (label != 0 && label != 1):
				return errors.New("label: --label 0 (benign) or 1 (malicious) is required")
			case len(note) > serve.MaxNoteBytes:
				return fmt.Errorf("label: --note: %d bytes, more than %d", len(note), serve.MaxNoteBytes)
			}
			if by == "" {
				by = os.Getenv("USER")
			}
			if _, err := os.Stat(filepath.Join(state, store.DBFile)); err != nil {
				return fmt.Errorf("label: %w", err)
			}
			st, err := store.Open(state, store.Options{LockWait: time.Second})
			if err != nil {
				return fmt.Errorf("label: %w", err)
			}
			defer st.Close()
			err = st.SetLabel(session, step, store.StepLabel{Label: label, Note: note, By: by, At: time.Now()})
			switch {
			case errors.Is(err, store.ErrNotFound):
				return fmt.Errorf("label: no session %s in %s", serve.ShortText(session), st.Path())
			case errors.Is(err, store.ErrNoStep):
				return fmt.Errorf("label: session %s has no step %d", session, step)
			case err != nil:
				return fmt.Errorf("label: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "label: session %s step %d labeled %d by %s\n", session, step, label, by)
			return st.Close()
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&state, "state", "", "state directory of mageguard serve or mcp (DIR/sessions.db)")
	fl.StringVar(&session, "session", "", "the session's id")
	fl.IntVar(&step, "step", -1, "the step's index, from 0")
	fl.IntVar(&label, "label", -1, "1: the step's action was malicious; 0: benign")
	fl.StringVar(&note, "note", "", "why (optional)")
	fl.StringVar(&by, "by", "", "the operator's name recorded with the label (default: $USER)")
	return cmd
}
