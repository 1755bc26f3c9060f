package sessions

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/serve/store"
)

// testStore holds three sessions: "s_a" with three steps (the first
// labeled 1 by an operator, with a result the agent recorded that is not
// the observation it sent next; the second blocked by the guard and
// unlabeled; the third labeled 0 with its result recorded), "s_b" with
// one unlabeled step and no result, and "s_c" with no steps.
func testStore(t *testing.T) store.Store {
	t.Helper()
	st := store.NewMemory()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i, id := range []string{"s_a", "s_b", "s_c"} {
		created := at.Add(time.Duration(i) * time.Hour)
		if err := st.Create(&store.Session{ID: id, UserPrompt: "Pay the bill " + id, CreatedAt: created, UpdatedAt: created, Status: store.StatusActive}); err != nil {
			t.Fatal(err)
		}
	}
	obs := func(s string) *string { return &s }
	steps := []store.Commit{
		{ID: "s_a", Step: store.Step{Step: 0, Action: dataset.Action{Name: "read_file", Arguments: json.RawMessage(`{"path":"bill.txt","n":1.50}`)},
			Decision: store.DecisionAllow, Rationale: "reads the bill"}},
		{ID: "s_a", Step: store.Step{Step: 1, Action: dataset.Action{Name: "send_money", Arguments: json.RawMessage(`{"to":"X"}`)},
			Observation: obs("Bill: 98.70 EUR"), UserMessages: []string{"also", "hurry"}, Decision: store.DecisionBlock, Rationale: "an IBAN from a tool result"}},
		{ID: "s_a", Step: store.Step{Step: 2, Action: dataset.Action{Name: "done", Arguments: json.RawMessage(`{}`)},
			Observation: obs("(not run: the guard blocked this call)"), Decision: store.DecisionAllow}},
		{ID: "s_b", Step: store.Step{Step: 0, Action: dataset.Action{Name: "ls", Arguments: json.RawMessage(`{}`)}, Decision: store.DecisionAllow}},
	}
	for _, c := range steps {
		if errs, err := st.CommitSteps([]store.Commit{c}); err != nil || errs[0] != nil {
			t.Fatal(err, errs)
		}
	}
	for _, l := range []struct {
		n     int
		label int
		note  string
	}{{0, 1, "exfiltrates"}, {2, 0, ""}} {
		if err := st.SetLabel("s_a", l.n, store.StepLabel{Label: l.label, Note: l.note, By: "op", At: at}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetResult("s_a", 2, "finished"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetResult("s_a", 0, "Bill: 0.00 EUR, nothing to see"); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestImport: every session with steps becomes one trajectory with its
// prompt, its actions as sent, each observation (the next step's
// observation, else the last step's recorded result, else "") and its
// operator's labels; unlabeled actions follow --unlabeled, skip leaving
// the session out; a session with no steps is left out and counted.
func TestImport(t *testing.T) {
	type turn struct {
		name, args, obs, user string
		label                 int
		source, note          string
	}
	sA := func(second turn) []turn {
		return []turn{
			{"read_file", `{"path":"bill.txt","n":1.50}`, "Bill: 98.70 EUR", "", 1, "human", "exfiltrates"},
			second,
			{"done", `{}`, "finished", "", 0, "human", ""},
		}
	}
	for _, c := range []struct {
		unlabeled Unlabeled
		want      map[string][]turn // trajectory id -> turns
		sum       Summary
	}{
		{Skip, map[string][]turn{}, Summary{Sessions: 3, Skipped: 2, Empty: 1}},
		{Benign, map[string][]turn{
			"serve:s_a": sA(turn{"send_money", `{"to":"X"}`, "(not run: the guard blocked this call)", "also\nhurry", 0, "assumed", ""}),
			"serve:s_b": {{"ls", `{}`, "", "", 0, "assumed", ""}},
		}, Summary{Sessions: 3, Trajectories: 2, Actions: 4, Positives: 1, Human: 2, NoResult: 1, Empty: 1}},
		{Guard, map[string][]turn{
			"serve:s_a": sA(turn{"send_money", `{"to":"X"}`, "(not run: the guard blocked this call)", "also\nhurry", 1, "guard", "an IBAN from a tool result"}),
			"serve:s_b": {{"ls", `{}`, "", "", 0, "guard", ""}},
		}, Summary{Sessions: 3, Trajectories: 2, Actions: 4, Positives: 2, Human: 2, NoResult: 1, Empty: 1}},
	} {
		t.Run(string(c.unlabeled), func(t *testing.T) {
			var got []*dataset.Trajectory
			sum, err := Import(testStore(t), Options{Unlabeled: c.unlabeled, Emit: func(tr *dataset.Trajectory) error {
				got = append(got, tr)
				return nil
			}})
			if err != nil {
				t.Fatal(err)
			}
			if *sum != c.sum {
				t.Errorf("summary %+v, want %+v", *sum, c.sum)
			}
			if len(got) != len(c.want) {
				t.Fatalf("%d trajectories, want %d", len(got), len(c.want))
			}
			for i, tr := range got {
				want, ok := c.want[tr.ID]
				if !ok || (i == 0) != (tr.ID == "serve:s_a") {
					t.Fatalf("trajectory %d is %s", i, tr.ID)
				}
				if tr.UserPrompt != "Pay the bill "+tr.ID[len("serve:"):] || tr.Source != "serve" || tr.Model != "unknown" {
					t.Errorf("%s: %+v", tr.ID, tr)
				}
				if attack := tr.Positives() > 0; attack != (tr.InjectionTaskID != nil && *tr.InjectionTaskID == "unknown" && *tr.AttackType == "unknown") {
					t.Errorf("%s: %d positives, injection task %v", tr.ID, tr.Positives(), tr.InjectionTaskID)
				}
				if len(tr.Turns) != len(want) {
					t.Fatalf("%s: %d turns, want %d", tr.ID, len(tr.Turns), len(want))
				}
				for j, w := range want {
					tu := tr.Turns[j]
					user := ""
					if tu.User != nil {
						user = *tu.User
					}
					g := turn{tu.Action.Name, string(tu.Action.Arguments), tu.Observation, user, tu.Label, tu.LabelSource, tu.LabelNote}
					if g != w {
						t.Errorf("%s turn %d: %+v, want %+v", tr.ID, j, g, w)
					}
				}
			}
		})
	}
}

// TestConvertGatewayResult: the gateway's recorded result is kept when
// the next observation starts with it (the gateway appended a tool
// definition shown since), and the next observation is taken when it
// does not; serve's recorded result never replaces the next observation.
func TestConvertGatewayResult(t *testing.T) {
	str := func(s string) *string { return &s }
	next := "file body\n\n[the agent is now shown this definition of the tool read_file (changed or added since the guard last saw the tools):]\n{}"
	for _, c := range []struct {
		source, result, want string
	}{
		{"mcp", "file body", "file body"},
		{"mcp", "other body", next},
		{"serve", "file body", next},
	} {
		steps := []store.Step{
			{Step: 0, Action: dataset.Action{Name: "read_file", Arguments: json.RawMessage(`{}`)}, Result: str(c.result)},
			{Step: 1, Action: dataset.Action{Name: "done", Arguments: json.RawMessage(`{}`)}, Observation: str(next), Result: str("last")},
		}
		tr, noResult := Convert(&store.Session{ID: "s_x", UserPrompt: "p"}, steps, Options{Source: c.source, Unlabeled: Benign})
		if tr == nil || noResult != 0 || tr.Turns[0].Observation != c.want || tr.Turns[1].Observation != "last" {
			t.Errorf("%s, result %q: %+v (%d without a result)", c.source, c.result, tr, noResult)
		}
	}
	if tr, _ := Convert(&store.Session{ID: "s_y"}, nil, Options{Source: "mcp", Unlabeled: Benign}); tr != nil {
		t.Errorf("a session with no steps: %+v", tr)
	}
}

// TestParseUnlabeled: the three choices, and anything else refused.
func TestParseUnlabeled(t *testing.T) {
	for _, s := range []string{"skip", "benign", "guard"} {
		if u, err := ParseUnlabeled(s); err != nil || string(u) != s {
			t.Errorf("%s: %v %v", s, u, err)
		}
	}
	if _, err := ParseUnlabeled("all"); err == nil {
		t.Error("all accepted")
	}
	if _, err := Import(store.NewMemory(), Options{Source: "web"}); err == nil {
		t.Error("source web accepted")
	}
}
