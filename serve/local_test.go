package serve

import (
	"context"
	"encoding/json"
	"strings"
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

// TestInProcessObservationsAreBounded: an in-process front end's
// observation longer than serve.max_body_bytes (which bounds the route's
// whole body, and so its observation) is cut to its head and tail around
// a marker before the guard and the store see it.
func TestInProcessObservationsAreBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 4096
	ts := newTestServer(t, cfg, false)
	ctx := context.Background()
	id, err := ts.srv.CreateSession("gateway", &CreateRequest{UserPrompt: "Read the log"})
	if err != nil {
		t.Fatal(err)
	}
	action := dataset.Action{Name: "read_file", Arguments: json.RawMessage(`{}`)}
	if _, err := ts.srv.Assess(ctx, id, &AssessRequest{Action: action}); err != nil {
		t.Fatal(err)
	}
	obs := "LOG-START " + strings.Repeat("line\n", 100_000) + "LOG-END"
	if _, err := ts.srv.Assess(ctx, id, &AssessRequest{Action: action, Observation: &obs}); err != nil {
		t.Fatal(err)
	}
	_, steps, err := ts.store.GetWithSteps(id)
	if err != nil || len(steps) != 2 {
		t.Fatalf("%d steps, %v", len(steps), err)
	}
	got := *steps[1].Observation
	if len(got) > 4096 || !strings.HasPrefix(got, "LOG-START line") || !strings.HasSuffix(got, "line\nLOG-END") || !strings.Contains(got, " bytes elided ...]") {
		t.Errorf("stored observation: %d bytes, %.60q", len(got), got)
	}
}
