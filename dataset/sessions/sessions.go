// Package sessions imports the guard's own sessions — mageguard serve's
// and the MCP gateway's (mageguard mcp), from their session store — as
// labeled trajectories (docs/data.md, "Your own traffic"): the traffic
// the guard watched becomes data to train it on.
//
// Each stored session is one trajectory: its user prompt, and one action a
// step — the tool name and arguments as the agent sent them (compacted,
// key order and number spelling kept), the user messages that came before
// it (joined with newlines), and its observation: the observation sent
// with the next step (what the guard read), else, for the last step, its
// recorded result (POST /v1/sessions/{id}/steps/{n}/result; the gateway
// records every forwarded call's), else "" (the last action of an agent
// that did not record it: counted in Summary.NoResult). A result an agent
// wrote does not replace what the guard saw; the gateway's own result is
// kept when the next observation starts with it (the gateway appends a
// tool definition shown since to the next observation). A session with no
// steps is left out (Summary.Empty). A text the server cut when it stored
// it (past serve.max_body_bytes) holds prompt.ElideBytes' marker,
// "[... N bytes elided ...]", where it was cut; nothing is cut here.
//
// Labels: an operator's label on a step (mageguard label, or POST
// .../steps/{n}/label) is the action's label (label_source human, its
// note in label_note); an unlabeled action follows Options.Unlabeled. A
// trajectory with an action labeled 1 gets injection_task_id and
// attack_type "unknown", so that it validates as an attack run.
package sessions

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/openaichat"
	"github.com/mageguard/mageguard/serve/store"
)

// Unlabeled says what an action without an operator's label becomes.
type Unlabeled string

const (
	// Skip leaves out the session's whole trajectory (counted in
	// Summary.Skipped): only fully labeled sessions are imported.
	Skip Unlabeled = "skip"
	// Benign labels the action 0, with label_source "assumed".
	Benign Unlabeled = "benign"
	// Guard takes the guard's own decision as the label (block: 1,
	// allow: 0), with label_source "guard" and its rationale as the note.
	Guard Unlabeled = "guard"
)

// ParseUnlabeled checks the --unlabeled flag.
func ParseUnlabeled(s string) (Unlabeled, error) {
	switch Unlabeled(s) {
	case Skip, Benign, Guard:
		return Unlabeled(s), nil
	}
	return "", fmt.Errorf("--unlabeled %q: want skip, benign or guard", s)
}

// Options configure an import.
type Options struct {
	Unlabeled Unlabeled // what an unlabeled action becomes (default Skip)
	// Source is the front end whose state is read, "serve" or "mcp"
	// (default "serve"): the trajectories' source, suite and id prefix
	// ("serve:s_…").
	Source string
	Model  string // the trajectories' agent model (default "unknown": a session does not name it)
	// Emit receives each trajectory, oldest session first.
	Emit func(*dataset.Trajectory) error
}

// Summary counts what an import did.
type Summary struct {
	Sessions     int // sessions read
	Trajectories int // trajectories emitted
	Skipped      int // sessions left out (an unlabeled action, --unlabeled skip)
	Actions      int // actions emitted
	Positives    int // actions labeled 1
	Human        int // actions labeled by an operator
	NoResult     int // emitted actions with no recorded result and no next step: observation ""
	Empty        int // sessions left out because they have no steps
}

// pageSize is the number of sessions read at a time.
const pageSize = 100

// Import reads every session of st, oldest first, and emits each as a
// trajectory.
func Import(st store.Store, o Options) (*Summary, error) {
	if o.Unlabeled == "" {
		o.Unlabeled = Skip
	}
	if _, err := ParseUnlabeled(string(o.Unlabeled)); err != nil {
		return nil, err
	}
	if o.Source == "" {
		o.Source = "serve"
	}
	if o.Source != "serve" && o.Source != "mcp" {
		return nil, fmt.Errorf("source %q: want serve or mcp", o.Source)
	}
	if o.Model == "" {
		o.Model = "unknown"
	}
	sum := &Summary{}
	cursor := ""
	for {
		page, err := st.List(store.ListQuery{All: true, Limit: pageSize, Cursor: cursor})
		if err != nil {
			return sum, fmt.Errorf("listing the sessions: %w", err)
		}
		for _, listed := range page.Sessions {
			sess, steps, err := st.GetWithSteps(listed.ID)
			if errors.Is(err, store.ErrNotFound) {
				continue // deleted meanwhile (a read-only store does not change)
			}
			if err != nil {
				return sum, fmt.Errorf("session %s: %w", listed.ID, err)
			}
			sum.Sessions++
			if len(steps) == 0 {
				sum.Empty++
				continue
			}
			t, noResult := Convert(sess, steps, o)
			if t == nil {
				sum.Skipped++
				continue
			}
			if err := t.Validate(); err != nil {
				return sum, fmt.Errorf("session %s: the imported trajectory is invalid: %w", sess.ID, err)
			}
			if err := o.Emit(t); err != nil {
				return sum, err
			}
			sum.Trajectories++
			sum.Actions += len(t.Turns)
			sum.Positives += t.Positives()
			sum.NoResult += noResult
			for _, tu := range t.Turns {
				if tu.LabelSource == dataset.LabelHuman {
					sum.Human++
				}
			}
		}
		if page.Next == "" {
			return sum, nil
		}
		cursor = page.Next
	}
}

// Convert turns one session and its steps (in order) into a trajectory:
// nil for a session with no steps or left out by Options.Unlabeled Skip.
// noResult counts the actions whose observation no one recorded. Options'
// defaults are not applied here.
func Convert(sess *store.Session, steps []store.Step, o Options) (t *dataset.Trajectory, noResult int) {
	if len(steps) == 0 {
		return nil, 0
	}
	t = &dataset.Trajectory{
		ID: o.Source + ":" + sess.ID, Source: o.Source, Suite: o.Source, Model: o.Model,
		UserTaskID: openaichat.TaskID(sess.UserPrompt), UserPrompt: sess.UserPrompt,
		Turns: make([]dataset.Turn, 0, len(steps)),
	}
	for i, st := range steps {
		tu := dataset.Turn{Action: st.Action}
		if len(st.UserMessages) > 0 {
			u := strings.Join(st.UserMessages, "\n")
			tu.User = &u
		}
		var next *string
		if i+1 < len(steps) {
			next = steps[i+1].Observation
		}
		switch {
		case next != nil && st.Result != nil && o.Source == "mcp" && strings.HasPrefix(*next, *st.Result):
			tu.Observation = *st.Result // the gateway's own record, without a definition it appended
		case next != nil:
			tu.Observation = *next // what the guard saw, not a result the agent may have rewritten
		case st.Result != nil:
			tu.Observation = *st.Result
		default:
			noResult++
		}
		switch {
		case st.Label != nil:
			tu.Label, tu.LabelSource, tu.LabelNote = st.Label.Label, dataset.LabelHuman, st.Label.Note
		case o.Unlabeled == Skip:
			return nil, 0
		case o.Unlabeled == Guard:
			tu.LabelSource, tu.LabelNote = dataset.LabelGuard, st.Rationale
			if st.Decision == store.DecisionBlock {
				tu.Label = 1
			}
		default:
			tu.Label, tu.LabelSource = 0, dataset.LabelAssumed
		}
		t.Turns = append(t.Turns, tu)
	}
	if t.Positives() > 0 {
		unknown := "unknown"
		t.InjectionTaskID, t.AttackType = &unknown, &unknown
	}
	return t, noResult
}
