package agentdojo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mageguard/mageguard/dataset"
)

// None is the path component of a benign run's attack and injection task.
const None = "none"

// RunPath is where a run log lies:
// <runs>/<model>/<suite>/<user_task>/<attack>/<injection_task>.json.
type RunPath struct {
	Model, Suite, UserTask, Attack, InjectionTask string
}

// ParseRunPath splits a path relative to the runs directory.
func ParseRunPath(rel string) (RunPath, error) {
	parts := strings.Split(filepath.ToSlash(rel), "/")
	if len(parts) != 5 || !strings.HasSuffix(parts[4], ".json") {
		return RunPath{}, fmt.Errorf("unexpected path %s (want <model>/<suite>/<user_task>/<attack>/<injection_task>.json)", rel)
	}
	for _, p := range parts {
		if p == "" {
			return RunPath{}, fmt.Errorf("unexpected path %s (empty component)", rel)
		}
	}
	return RunPath{parts[0], parts[1], parts[2], parts[3], strings.TrimSuffix(parts[4], ".json")}, nil
}

// ID is the trajectory id: agentdojo:<model>:<suite>:<user_task>:<attack>:<injection_task>.
func (p RunPath) ID() string {
	return strings.Join([]string{"agentdojo", p.Model, p.Suite, p.UserTask, p.Attack, p.InjectionTask}, ":")
}

// Sanity reports whether the run is one of the benchmark's sanity runs (an
// injection task given as the user task): those are not trajectories.
func (p RunPath) Sanity() bool { return strings.HasPrefix(p.UserTask, "injection_task_") }

// Convert turns one run into a trajectory and labels its actions with rules.
// It also returns, for every action, the name of the rule that labeled it 1
// ("" for 0). Errors name the offending field of the run log.
func Convert(run *Run, p RunPath, rules *Rules) (*dataset.Trajectory, []string, error) {
	if err := checkPath(run, p); err != nil {
		return nil, nil, err
	}
	userTask, err := taskNumber(run.UserTaskID, "user_task_")
	if err != nil {
		return nil, nil, fmt.Errorf("field user_task_id: %w", err)
	}
	benign := run.InjectionTaskID == nil
	injTask := -1
	if !benign {
		if injTask, err = taskNumber(*run.InjectionTaskID, "injection_task_"); err != nil {
			return nil, nil, fmt.Errorf("field injection_task_id: %w", err)
		}
	}
	if err := rules.CheckRun(run.SuiteName, injTask, benign); err != nil {
		return nil, nil, err
	}

	t := &dataset.Trajectory{
		ID: p.ID(), Source: "agentdojo", Suite: run.SuiteName, UserTaskID: run.UserTaskID,
		InjectionTaskID: run.InjectionTaskID, AttackType: run.AttackType, Model: p.Model,
		Utility: run.Utility, Turns: []dataset.Turn{},
	}
	if !benign {
		t.Security = run.Security
	}
	if err := addTurns(t, run.Messages); err != nil {
		return nil, nil, err
	}
	for _, rt := range run.Tools {
		if rt.Function != nil {
			rt = *rt.Function
		}
		tool := dataset.Tool{Name: rt.Name, Description: rt.Description}
		if p := bytes.TrimSpace(rt.Parameters); len(p) > 0 && string(p) != "null" {
			var buf bytes.Buffer
			if err := json.Compact(&buf, p); err != nil {
				return nil, nil, fmt.Errorf("field tools: %w", err)
			}
			tool.Parameters = buf.Bytes()
		}
		t.Tools = append(t.Tools, tool)
	}
	base := Action{Suite: run.SuiteName, UserTask: userTask, InjectionTask: injTask, Benign: benign}
	why, err := labelTurns(t, base, run.Injections, rules)
	if err != nil {
		return nil, nil, err
	}
	return t, why, nil
}

// checkPath checks that the run is where its path says.
func checkPath(run *Run, p RunPath) error {
	injPath, attPath := None, None
	if run.InjectionTaskID != nil {
		injPath = *run.InjectionTaskID
	}
	if run.AttackType != nil {
		attPath = *run.AttackType
	}
	for _, c := range []struct{ field, got, want string }{
		{"suite_name", run.SuiteName, p.Suite},
		{"user_task_id", run.UserTaskID, p.UserTask},
		{"injection_task_id", injPath, p.InjectionTask},
		{"attack_type", attPath, p.Attack},
	} {
		if c.got != c.want {
			return fmt.Errorf("field %s: %q does not match the path (%q)", c.field, c.got, c.want)
		}
	}
	return nil
}

// pendingCall is a tool call of the latest assistant message, waiting for
// the tool message that answers it.
type pendingCall struct {
	turn     int    // the call's turn in the trajectory
	id       string // its tool_call_id ("" when it has none)
	answered bool
}

// addTurns walks the messages into t: the first user message is the
// prompt, later ones go to the next turn; tool calls become turns; tool
// messages fill in the observations of the latest assistant message's calls.
func addTurns(t *dataset.Trajectory, messages []Message) error {
	var calls []pendingCall
	var userMsgs []string
	sawPrompt := false
	for i, m := range messages {
		at := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case "system":
		case "user":
			if !sawPrompt {
				t.UserPrompt, sawPrompt = m.Content.Text, true
			} else {
				userMsgs = append(userMsgs, m.Content.Text)
			}
		case "assistant":
			calls = calls[:0]
			for j, tc := range m.ToolCalls {
				if tc.Function == "" {
					return fmt.Errorf("field %s.tool_calls[%d].function: empty", at, j)
				}
				args, err := argsObject(tc.Args)
				if err != nil {
					return fmt.Errorf("field %s.tool_calls[%d].args: %w", at, j, err)
				}
				tu := dataset.Turn{Action: dataset.Action{Name: tc.Function, Arguments: args}}
				if len(userMsgs) > 0 {
					u := strings.Join(userMsgs, "\n\n")
					tu.User, userMsgs = &u, nil
				}
				id := ""
				if tc.ID != nil {
					id = *tc.ID
				}
				calls = append(calls, pendingCall{turn: len(t.Turns), id: id})
				t.Turns = append(t.Turns, tu)
			}
		case "tool":
			k := answered(calls, m.ToolCallID)
			if k < 0 {
				return fmt.Errorf("field %s: tool message answers no pending tool call", at)
			}
			calls[k].answered = true
			t.Turns[calls[k].turn].Observation = observation(m)
		default:
			return fmt.Errorf("field %s.role: unknown role %q", at, m.Role)
		}
	}
	if !sawPrompt {
		return fmt.Errorf("field messages: no user message")
	}
	return nil
}

// answered returns the index of the pending call a tool message with
// tool_call_id id answers: the one with that id, else the first one
// unanswered; -1 when none is left.
func answered(calls []pendingCall, id *string) int {
	if id != nil && *id != "" {
		for c := range calls {
			if !calls[c].answered && calls[c].id == *id {
				return c
			}
		}
	}
	for c := range calls {
		if !calls[c].answered {
			return c
		}
	}
	return -1
}

// labelTurns labels every action of t with rules, in order ("after an
// earlier positive" needs the order); base holds what every action of the
// run shares, injected the run's injected texts. It returns the rule that
// labeled each action 1 ("" for 0).
func labelTurns(t *dataset.Trajectory, base Action, injected map[string]string, rules *Rules) ([]string, error) {
	for _, v := range injected {
		if n := normText(v); n != "" {
			base.Injections = append(base.Injections, n)
		}
	}
	why := make([]string, len(t.Turns))
	earlier := false
	for i := range t.Turns {
		tu := &t.Turns[i]
		args, err := decodeArgs(tu.Action.Arguments)
		if err != nil {
			return nil, fmt.Errorf("turn %d arguments: %w", i, err)
		}
		a := base
		a.Tool, a.Args, a.EarlierPositive = tu.Action.Name, args, earlier
		tu.Label, why[i] = rules.Label(&a)
		tu.LabelSource = dataset.LabelRules
		earlier = earlier || tu.Label == 1
	}
	return why, nil
}

// observation is a tool message's text, or "ERROR: <error>" when the tool failed.
func observation(m Message) string {
	text := m.Content.Text
	if m.Error == nil || *m.Error == "" {
		return text
	}
	if text == "" {
		return "ERROR: " + *m.Error
	}
	return text + "\nERROR: " + *m.Error
}

// argsObject returns a call's args as compact JSON; absent or null args are {}.
func argsObject(raw json.RawMessage) (json.RawMessage, error) {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || string(b) == "null" {
		return json.RawMessage("{}"), nil
	}
	if b[0] != '{' {
		return nil, fmt.Errorf("want an object, got %.20s", b)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func decodeArgs(raw json.RawMessage) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// taskNumber returns K of prefix+K.
func taskNumber(id, prefix string) (int, error) {
	k, err := strconv.Atoi(strings.TrimPrefix(id, prefix))
	if err != nil || !strings.HasPrefix(id, prefix) || k < 0 {
		return 0, fmt.Errorf("%q is not %sK", id, prefix)
	}
	return k, nil
}
