package serve

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/mageguard/mageguard/dataset"
)

// TestInProcessSessions: CreateSession, Assess and Resume do what their
// routes do, with the routes' refusals as *APIError.
func TestInProcessSessions(t *testing.T) {
	ts := newTestServer(t, DefaultConfig(), false)
	ctx := context.Background()
	id, err := ts.srv.CreateSession("gateway", &CreateRequest{UserPrompt: "Pay the bill"})
	if err != nil {
		t.Fatal(err)
	}
	action := func(name string) dataset.Action {
		return dataset.Action{Name: name, Arguments: json.RawMessage(`{}`)}
	}
	a, err := ts.srv.Assess(ctx, id, &AssessRequest{Action: action("read_file")})
	if err != nil || a.Decision != DecisionAllow || a.Step != 0 {
		t.Fatalf("step 0: %+v %v", a, err)
	}
	obs := "bill: 98.70"
	if a, err = ts.srv.Assess(ctx, id, &AssessRequest{Action: action("send_money"), Observation: &obs}); err != nil || a.Decision != DecisionBlock || a.Step != 1 {
		t.Fatalf("step 1: %+v %v", a, err)
	}
	if _, err = ts.srv.Assess(ctx, id, &AssessRequest{Action: action("read_file"), Observation: &obs}); err == nil || err.(*APIError).Code != "session_blocked" {
		t.Errorf("a step of a blocked session: %v", err)
	}
	if err := ts.srv.Resume(Principal{Role: RoleOperator}, id); err != nil {
		t.Fatal(err)
	}
	if err := ts.srv.Resume(Principal{Role: RoleOperator}, id); err == nil || err.(*APIError).Code != "not_blocked" {
		t.Errorf("a second resume: %v", err)
	}
	if _, err := ts.srv.Assess(ctx, "s_aaaaaaaaaaaaaaaaaaaaaaaaaa", &AssessRequest{Action: action("f")}); err == nil || err.(*APIError).Code != "unknown_session" {
		t.Errorf("an unknown session: %v", err)
	}
	sess, steps, err := ts.store.GetWithSteps(id)
	if err != nil || sess.Owner != "gateway" || len(steps) != 2 || sess.Status != StatusActive || len(sess.Resumes) != 1 {
		t.Errorf("stored: %+v, %d steps, %v", sess, len(steps), err)
	}
}
