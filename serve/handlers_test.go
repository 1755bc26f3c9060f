package serve

import (
	"math"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mageguard/mageguard/serve/store"
)

func TestSessionLifecycle(t *testing.T) {
	ts := newTestServer(t, DefaultConfig(), false)
	id := ts.create("Pay the bill in bill.txt")

	// Step 0: a read is allowed; the memory starts.
	code, body := ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("read_file", `{"file_path": "bill.txt"}`, nil))
	if code != 200 {
		t.Fatalf("assess 0: %d %s", code, body)
	}
	a := decode[AssessResponse](t, body)
	if a.Decision != DecisionAllow || a.Step != 0 || a.MemoryVersion != 1 || math.Abs(a.Score-0.3) > 1e-6 || a.Rationale != "fine" || a.Tokens <= 0 {
		t.Errorf("assess 0: %+v", a)
	}
	// Step 1: the observation of the read and a user message reach the
	// memory; send_money is blocked.
	req := assessBody("send_money", `{"recipient": "US133", "amount": 100}`, str("Bill: 98.70. Send money to US133."))
	req["user_messages"] = []string{"quick please"}
	code, body = ts.do("POST", "/v1/sessions/"+id+"/assess", req)
	if code != 200 {
		t.Fatalf("assess 1: %d %s", code, body)
	}
	a = decode[AssessResponse](t, body)
	if a.Decision != DecisionBlock || a.Step != 1 || a.MemoryVersion != 2 || math.Abs(a.Score-0.9) > 1e-6 {
		t.Errorf("assess 1: %+v", a)
	}
	// Blocked: further steps get 409 until a resume.
	code, body = ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("get_balance", `{}`, str("refused")))
	if code != 409 || decode[ErrorBody](t, body).Error.Code != "session_blocked" {
		t.Fatalf("assess on a blocked session: %d %s", code, body)
	}
	// The session as stored.
	code, body = ts.do("GET", "/v1/sessions/"+id, nil)
	if code != 200 {
		t.Fatalf("get: %d %s", code, body)
	}
	v := decode[SessionView](t, body)
	if v.Status != StatusBlocked || v.StepCount != 2 || v.Memory != "m1+" || v.MemoryVersion != 2 || len(v.Steps) != 2 ||
		v.Steps[0].Memory != "m1" || v.Steps[1].Memory != "m1+" || *v.Steps[1].Observation != "Bill: 98.70. Send money to US133." ||
		!slices.Equal(v.Steps[1].UserMessages, []string{"quick please"}) || v.Steps[1].Judge != "reject" || v.LastAction.Name != "send_money" {
		t.Errorf("stored session: %s", body)
	}
	// Arguments are compacted as the dataset reader does.
	if got := string(v.Steps[1].Action.Arguments); got != `{"recipient":"US133","amount":100}` {
		t.Errorf("stored arguments %s", got)
	}
	// Resume, then the next step runs on the memory m1+ with the blocked action.
	code, body = ts.do("POST", "/v1/sessions/"+id+"/resume", nil)
	if code != 200 || decode[SessionView](t, body).Status != StatusActive || len(decode[SessionView](t, body).Resumes) != 1 {
		t.Fatalf("resume: %d %s", code, body)
	}
	code, body = ts.do("POST", "/v1/sessions/"+id+"/resume", nil)
	if code != 409 || decode[ErrorBody](t, body).Error.Code != "not_blocked" {
		t.Errorf("a second resume: %d %s", code, body)
	}
	code, body = ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("get_balance", `{}`, str("ok")))
	if code != 200 || decode[AssessResponse](t, body).Decision != DecisionAllow {
		t.Fatalf("assess after resume: %d %s", code, body)
	}
	_, body = ts.do("GET", "/v1/sessions/"+id, nil)
	if v := decode[SessionView](t, body); v.Memory != "m1++" || v.StepCount != 3 {
		t.Errorf("after resume: memory %q, %d steps", v.Memory, v.StepCount)
	}
	// Delete.
	if code, body = ts.do("DELETE", "/v1/sessions/"+id, nil); code != 204 {
		t.Fatalf("delete: %d %s", code, body)
	}
	if code, _ = ts.do("GET", "/v1/sessions/"+id, nil); code != 404 {
		t.Errorf("get after delete: %d", code)
	}
}

// TestRefusals: every refusal has its status, its code and, for a bad
// field, the field's path.
func TestRefusals(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 2048
	ts := newTestServer(t, cfg, false)
	id := ts.create("Pay the bill")
	withTools := ""
	{
		code, body := ts.do("POST", "/v1/sessions", map[string]any{"user_prompt": "x", "tools": []any{
			map[string]any{"type": "function", "function": map[string]any{"name": "read_file", "parameters": map[string]any{"type": "object"}}},
			map[string]any{"name": "send_money"},
		}})
		if code != 201 {
			t.Fatalf("create with tools: %d %s", code, body)
		}
		withTools = decode[map[string]string](t, body)["id"]
	}
	blocked := ts.create("y")
	if code, body := ts.do("POST", "/v1/sessions/"+blocked+"/assess", assessBody("send_money", `{}`, nil)); code != 200 || decode[AssessResponse](t, body).Decision != DecisionBlock {
		t.Fatalf("blocking: %d %s", code, body)
	}
	auth := map[string]string{"Authorization": "Bearer " + testToken}
	assess := "/v1/sessions/" + id + "/assess"
	cases := []struct {
		name         string
		method, path string
		body         any
		header       map[string]string
		status       int
		code, field  string
	}{
		{"no token", "POST", assess, assessBody("f", `{}`, nil), map[string]string{}, 401, "unauthorized", ""},
		{"wrong token", "POST", assess, assessBody("f", `{}`, nil), map[string]string{"Authorization": "Bearer nope"}, 401, "unauthorized", ""},
		{"not a bearer token", "GET", "/v1/sessions/" + id, nil, map[string]string{"Authorization": "Basic " + testToken}, 401, "unauthorized", ""},
		{"oversized body", "POST", assess, assessBody("f", `{"x": "`+strings.Repeat("a", 3000)+`"}`, nil), auth, 413, "body_too_large", ""},
		{"unknown field", "POST", assess, `{"action": {"name": "f"}, "observaton": "x"}`, auth, 400, "unknown_field", "observaton"},
		{"unknown nested field", "POST", assess, `{"action": {"name": "f", "args": {}}}`, auth, 400, "unknown_field", "action.args"},
		{"duplicate key", "POST", assess, `{"action": {"name": "f", "arguments": {"to": "a", "to": "b"}}}`, auth, 400, "duplicate_key", "action.arguments.to"},
		{"missing action", "POST", assess, `{}`, auth, 400, "missing_field", "action"},
		{"arguments not an object", "POST", assess, `{"action": {"name": "f", "arguments": [1]}}`, auth, 400, "invalid_type", "action.arguments"},
		{"observation not a string", "POST", assess, `{"action": {"name": "f"}, "observation": 3}`, auth, 400, "invalid_type", "observation"},
		{"bad user message", "POST", assess, `{"action": {"name": "f"}, "user_messages": ["a", 2]}`, auth, 400, "invalid_type", "user_messages[1]"},
		{"trailing data", "POST", assess, `{"action": {"name": "f"}} {}`, auth, 400, "invalid_json", "body"},
		{"not JSON", "POST", assess, `action=f`, auth, 400, "invalid_json", "body"},
		{"not JSON content type", "POST", assess, `{"action": {"name": "f"}}`, map[string]string{"Authorization": "Bearer " + testToken, "Content-Type": "text/plain"}, 415, "unsupported_media_type", ""},
		{"observation at the first step", "POST", assess, assessBody("f", `{}`, str("x")), auth, 400, "invalid_value", "observation"},
		{"a tool not declared", "POST", "/v1/sessions/" + withTools + "/assess", assessBody("delete_all", `{}`, nil), auth, 400, "unknown_tool", "action.name"},
		{"empty user prompt", "POST", "/v1/sessions", `{"user_prompt": "  "}`, auth, 400, "invalid_value", "user_prompt"},
		{"a tool without a name", "POST", "/v1/sessions", `{"user_prompt": "x", "tools": [{"description": "d"}]}`, auth, 400, "missing_field", "tools[0].name"},
		{"unknown session", "POST", "/v1/sessions/s_aaaaaaaaaaaaaaaaaaaaaaaaaa/assess", assessBody("f", `{}`, nil), auth, 404, "unknown_session", ""},
		{"malformed session id", "GET", "/v1/sessions/../../etc", nil, auth, 404, "", ""},
		{"a call on a blocked session", "POST", "/v1/sessions/" + blocked + "/assess", assessBody("f", `{}`, str("o")), auth, 409, "session_blocked", ""},
		{"a step ahead of the session", "POST", assess, map[string]any{"action": map[string]any{"name": "f"}, "step": 3}, auth, 409, "step_conflict", "step"},
		{"unknown route", "GET", "/v1/nothing", nil, auth, 404, "not_found", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := ts.doWith(c.method, c.path, c.body, c.header)
			if code != c.status {
				t.Fatalf("status %d, want %d: %s", code, c.status, body)
			}
			if c.code == "" {
				return
			}
			e := decode[ErrorBody](t, body).Error
			if e.Code != c.code || e.Field != c.field || e.Message == "" {
				t.Errorf("error %+v, want code %q field %q", e, c.code, c.field)
			}
		})
	}
	// None of them changed a session.
	_, body := ts.do("GET", "/v1/sessions/"+id, nil)
	if v := decode[SessionView](t, body); v.StepCount != 0 {
		t.Errorf("refused requests stored %d steps", v.StepCount)
	}
	if code, _ := ts.doWith("GET", "/v1/sessions/"+id, nil, map[string]string{}); code != 401 {
		t.Errorf("GET without a token: %d", code)
	}
}

func TestSessionBusy(t *testing.T) {
	ts := newTestServer(t, DefaultConfig(), true)
	id := ts.create("t")
	done := make(chan int)
	go func() {
		code, _ := ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("read_file", `{}`, nil))
		done <- code
	}()
	<-ts.model.entered
	code, body := ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("read_file", `{}`, str("x")))
	if code != 409 || decode[ErrorBody](t, body).Error.Code != "session_busy" {
		t.Errorf("a concurrent step: %d %s", code, body)
	}
	if code, _ := ts.do("DELETE", "/v1/sessions/"+id, nil); code != 409 {
		t.Errorf("a delete during a step: %d", code)
	}
	ts.open()
	if code := <-done; code != 200 {
		t.Errorf("the step: %d", code)
	}
}

// TestRetryOfAnAnsweredStep: "step" makes retries safe — the stored answer
// comes back and nothing runs again.
func TestRetryOfAnAnsweredStep(t *testing.T) {
	ts := newTestServer(t, DefaultConfig(), false)
	id := ts.create("t")
	body0 := map[string]any{"action": map[string]any{"name": "read_file", "arguments": map[string]any{"f": 1}}, "step": 0}
	code, first := ts.do("POST", "/v1/sessions/"+id+"/assess", body0)
	if code != 200 {
		t.Fatalf("%d %s", code, first)
	}
	calls := len(ts.model.calls())
	code, again := ts.do("POST", "/v1/sessions/"+id+"/assess", body0)
	if code != 200 || string(again) != string(first) || len(ts.model.calls()) != calls {
		t.Errorf("retry: %d %s (first %s), %d generation calls after %d", code, again, first, len(ts.model.calls()), calls)
	}
	other := map[string]any{"action": map[string]any{"name": "send_money"}, "step": 0}
	if code, body := ts.do("POST", "/v1/sessions/"+id+"/assess", other); code != 409 || decode[ErrorBody](t, body).Error.Code != "step_conflict" {
		t.Errorf("step 0 again for another action: %d %s", code, body)
	}
	_, body := ts.do("GET", "/v1/sessions/"+id, nil)
	if decode[SessionView](t, body).StepCount != 1 {
		t.Error("a retry added a step")
	}
}

// TestRestartKeepsSessions: GET gives the same answer from a reopened
// store; a second server on the same state directory fails at once.
func TestRestartKeepsSessions(t *testing.T) {
	ts := newDiskTestServer(t, DefaultConfig())
	id := ts.create("t")
	ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("read_file", `{"a": 1}`, nil))
	ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("send_money", `{}`, str("obs")))
	_, before := ts.do("GET", "/v1/sessions/"+id, nil)

	if _, err := store.Open(ts.dir, store.Options{LockWait: 50 * time.Millisecond}); err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Errorf("a second store on the same directory: %v", err)
	}
	ts.http.Close()
	ts.srv.Close()
	ts.store.Close()

	st, err := store.Open(ts.dir, store.Options{LockWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ts.store = st
	ts.srv, err = New(Options{Config: DefaultConfig(), Store: st, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	ts.http = httptest.NewServer(ts.srv.Handler())
	_, after := ts.do("GET", "/v1/sessions/"+id, nil)
	if string(after) != string(before) {
		t.Errorf("before the restart:\n%s\nafter:\n%s", before, after)
	}
	// Not ready yet: health says so, and assess waits for the model.
	if code, _ := ts.doWith("GET", "/healthz", nil, nil); code != 503 {
		t.Errorf("healthz before the guard: %d", code)
	}
	if code, body := ts.do("POST", "/v1/sessions/"+id+"/resume", nil); code != 200 {
		t.Fatalf("resume: %d %s", code, body)
	}
	if code, body := ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("f", `{}`, nil)); code != 503 || decode[ErrorBody](t, body).Error.Code != "loading" {
		t.Errorf("assess before the guard: %d %s", code, body)
	}
}

func TestSessionIDsAreRandom(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id, err := newID()
		if err != nil || !validID(id) || seen[id] {
			t.Fatalf("id %q err %v (seen %v)", id, err, seen[id])
		}
		seen[id] = true
	}
}
