package serve

import (
	"testing"
	"time"

	"github.com/mageguard/mageguard/serve/store"
)

// TestLabels: an operator labels any session's step, the last label
// standing, with the operator's name and the time, and GET shows it; an
// agent may not label (403 operator_only, its own session included;
// another's is 404 as for a session that does not exist); a label not 0
// or 1, an unknown field or a long note is 400; a missing step or
// session is 404.
func TestLabels(t *testing.T) {
	ts := newTenantServer(t)
	id := ts.create("Pay the bill") // agent a's
	for i, name := range []string{"read_file", "send_money"} {
		var obs *string
		if i > 0 {
			obs = str("ok")
		}
		if code, body := ts.as(agentA, "POST", "/v1/sessions/"+id+"/assess", assessBody(name, `{}`, obs)); code != 200 {
			t.Fatalf("assess: %d %s", code, body)
		}
	}
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	ts.srv.now = func() time.Time { return at }
	path := "/v1/sessions/" + id + "/steps/1/label"
	for _, c := range []struct {
		name, token, path string
		body              any
		code              int
		errCode           string
	}{
		{"agent, own session", agentA, path, map[string]any{"label": 1}, 403, "operator_only"},
		{"agent, another's session", agentB, path, map[string]any{"label": 1}, 404, "unknown_session"},
		{"label 2", operator, path, `{"label": 2}`, 400, "invalid_value"},
		{"label true", operator, path, `{"label": true}`, 400, "invalid_value"},
		{"label as a string", operator, path, `{"label": "1"}`, 400, "invalid_value"},
		{"label 1.0", operator, path, `{"label": 1.0}`, 400, "invalid_value"},
		{"no label", operator, path, `{"note": "x"}`, 400, "missing_field"},
		{"unknown field", operator, path, `{"label": 1, "by": "eve"}`, 400, "unknown_field"},
		{"label twice", operator, path, `{"label": 0, "label": 1}`, 400, "duplicate_key"},
		{"note too long", operator, path, map[string]any{"label": 1, "note": string(make([]byte, MaxNoteBytes+1))}, 400, "invalid_value"},
		{"step 2 of 2", operator, "/v1/sessions/" + id + "/steps/2/label", map[string]any{"label": 1}, 404, "unknown_step"},
		{"step 01", operator, "/v1/sessions/" + id + "/steps/01/label", map[string]any{"label": 1}, 404, "unknown_step"},
		{"step -1", operator, "/v1/sessions/" + id + "/steps/-1/label", map[string]any{"label": 1}, 404, "unknown_step"},
		{"no session", operator, "/v1/sessions/s_aaaaaaaaaaaaaaaaaaaaaaaaaa/steps/0/label", map[string]any{"label": 1}, 404, "unknown_session"},
	} {
		code, body := ts.as(c.token, "POST", c.path, c.body)
		if code != c.code || decode[ErrorBody](t, body).Error.Code != c.errCode {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, body, c.code, c.errCode)
		}
	}
	if _, steps, _ := ts.store.GetWithSteps(id); steps[0].Label != nil || steps[1].Label != nil {
		t.Fatalf("a refused label was stored: %+v %+v", steps[0].Label, steps[1].Label)
	}
	if code, body := ts.as(operator, "POST", path, map[string]any{"label": 0, "note": "looked odd"}); code != 200 {
		t.Fatalf("operator's first label: %d %s", code, body)
	}
	at = at.Add(time.Minute)
	code, body := ts.as(operator, "POST", path, map[string]any{"label": 1, "note": "an IBAN from the bill"})
	if st := decode[Step](t, body); code != 200 || st.Step != 1 || st.Label == nil || st.Label.Label != 1 {
		t.Fatalf("operator's second label: %d %s", code, body)
	}
	_, body = ts.as(operator, "GET", "/v1/sessions/"+id, nil)
	v := decode[SessionView](t, body)
	want := store.StepLabel{Label: 1, Note: "an IBAN from the bill", By: "op", At: at}
	if v.Steps[0].Label != nil || v.Steps[1].Label == nil || *v.Steps[1].Label != want {
		t.Errorf("GET shows labels %+v and %+v, want none and %+v", v.Steps[0].Label, v.Steps[1].Label, want)
	}
	// An agent reads its session's labels.
	if _, body := ts.as(agentA, "GET", "/v1/sessions/"+id, nil); decode[SessionView](t, body).Steps[1].Label == nil {
		t.Errorf("the agent's GET: %s", body)
	}
}

// TestResults: the session's agent (or an operator) records what a step's
// action returned, the last one standing, and GET shows it; another
// agent's session is 404; a body without an observation, with an unknown
// field or one not a string is 400; a missing step is 404.
func TestResults(t *testing.T) {
	ts := newTenantServer(t)
	id := ts.create("Pay the bill") // agent a's
	if code, body := ts.as(agentA, "POST", "/v1/sessions/"+id+"/assess", assessBody("read_file", `{}`, nil)); code != 200 {
		t.Fatalf("assess: %d %s", code, body)
	}
	path := "/v1/sessions/" + id + "/steps/0/result"
	for _, c := range []struct {
		name, token, path string
		body              any
		code              int
		errCode           string
	}{
		{"agent, another's session", agentB, path, map[string]any{"observation": "x"}, 404, "unknown_session"},
		{"no observation", agentA, path, `{}`, 400, "missing_field"},
		{"null observation", agentA, path, `{"observation": null}`, 400, "missing_field"},
		{"observation a number", agentA, path, `{"observation": 1}`, 400, "invalid_type"},
		{"unknown field", agentA, path, `{"observation": "x", "step": 0}`, 400, "unknown_field"},
		{"step 1 of 1", agentA, "/v1/sessions/" + id + "/steps/1/result", map[string]any{"observation": "x"}, 404, "unknown_step"},
	} {
		code, body := ts.as(c.token, "POST", c.path, c.body)
		if code != c.code || decode[ErrorBody](t, body).Error.Code != c.errCode {
			t.Errorf("%s: %d %s, want %d %s", c.name, code, body, c.code, c.errCode)
		}
	}
	if st, _ := ts.store.GetStep(id, 0); st.Result != nil {
		t.Fatalf("a refused result was stored: %q", *st.Result)
	}
	if code, body := ts.as(operator, "POST", path, map[string]any{"observation": "first"}); code != 200 {
		t.Fatalf("operator's result: %d %s", code, body)
	}
	code, body := ts.as(agentA, "POST", path, map[string]any{"observation": "the bill: IBAN X"})
	if st := decode[Step](t, body); code != 200 || st.Result == nil || *st.Result != "the bill: IBAN X" {
		t.Fatalf("agent's result: %d %s", code, body)
	}
	_, body = ts.as(agentA, "GET", "/v1/sessions/"+id, nil)
	if v := decode[SessionView](t, body); v.Steps[0].Result == nil || *v.Steps[0].Result != "the bill: IBAN X" {
		t.Errorf("GET shows result %v", v.Steps[0].Result)
	}
}
