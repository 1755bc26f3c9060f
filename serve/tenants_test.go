package serve

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mageguard/mageguard/serve/store"
)

func digest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func TestParseTokens(t *testing.T) {
	a, b := digest("agent-token-aaaaaaaa"), digest("operator-token-bbbbbbbb")
	good := fmt.Sprintf("tokens:\n  - {name: billing, role: agent, sha256: %s}\n  - {name: alice, role: operator, sha256: %s}\n", a, strings.ToUpper(b))
	tokens, err := ParseTokens([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseTokens([]byte(fmt.Sprintf("tokens:\n  - {name: operator, role: operator, sha256: %s}\n", a))); err != nil {
		t.Errorf("an operator named operator: %v", err)
	}
	for token, want := range map[string]Principal{
		"agent-token-aaaaaaaa":    {Name: "billing", Role: RoleAgent},
		"operator-token-bbbbbbbb": {Name: "alice", Role: RoleOperator},
	} {
		if got, ok := tokens.Lookup(token); !ok || got != want {
			t.Errorf("Lookup(%q) = %+v, %v; want %+v", token, got, ok, want)
		}
	}
	for _, wrong := range []string{"", "agent-token-aaaaaaa", a} {
		if p, ok := tokens.Lookup(wrong); ok {
			t.Errorf("Lookup(%q) = %+v", wrong, p)
		}
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"empty", "tokens: []\n", "no tokens"},
		{"unknown key", fmt.Sprintf("tokens:\n  - {name: x, role: agent, sha256: %s, token: y}\n", a), "field token not found"},
		{"unknown top key", "token: x\n", "field token not found"},
		{"bad role", fmt.Sprintf("tokens:\n  - {name: x, role: admin, sha256: %s}\n", a), `role "admin"`},
		{"bad name", fmt.Sprintf("tokens:\n  - {name: 'a b', role: agent, sha256: %s}\n", a), `name "a b"`},
		{"no name", fmt.Sprintf("tokens:\n  - {role: agent, sha256: %s}\n", a), `name ""`},
		{"a name of 64 KiB", fmt.Sprintf("tokens:\n  - {name: %s, role: agent, sha256: %s}\n", strings.Repeat("x", 1<<16), a), "want 1 to 64"},
		{"name twice", fmt.Sprintf("tokens:\n  - {name: x, role: agent, sha256: %s}\n  - {name: x, role: agent, sha256: %s}\n", a, b), "given twice"},
		{"digest twice", fmt.Sprintf("tokens:\n  - {name: x, role: agent, sha256: %s}\n  - {name: y, role: agent, sha256: %s}\n", a, a), "the same token"},
		{"short digest", "tokens:\n  - {name: x, role: agent, sha256: abcd}\n", "64 hex digits"},
		{"an agent named operator", fmt.Sprintf("tokens:\n  - {name: operator, role: agent, sha256: %s}\n", a), `name "operator" is reserved`},
		{"not hex", fmt.Sprintf("tokens:\n  - {name: x, role: agent, sha256: %s}\n", strings.Repeat("g", 64)), "64 hex digits"},
	} {
		if _, err := ParseTokens([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// Tokens of TestTenants: two agents and an operator.
const (
	agentA   = "agent-a-token-0123456789"
	agentB   = "agent-b-token-0123456789"
	operator = "operator-token-0123456789"
)

// newTenantServer is newTestServer with the tokens of agentA, agentB and
// operator.
func newTenantServer(t *testing.T) *testServer {
	t.Helper()
	return newTenantServerConfig(t, DefaultConfig())
}

// newTenantServerConfig is newTenantServer with a serve section.
func newTenantServerConfig(t *testing.T, cfg Config) *testServer {
	t.Helper()
	tokens, err := ParseTokens([]byte(fmt.Sprintf("tokens:\n  - {name: a, role: agent, sha256: %s}\n  - {name: b, role: agent, sha256: %s}\n  - {name: op, role: operator, sha256: %s}\n",
		digest(agentA), digest(agentB), digest(operator))))
	if err != nil {
		t.Fatal(err)
	}
	return startTestServer(t, Options{Config: cfg, Tokens: tokens}, agentA, false)
}

// as sends a request with token.
func (ts *testServer) as(token, method, path string, body any) (int, []byte) {
	ts.t.Helper()
	return ts.doWith(method, path, body, map[string]string{"Authorization": "Bearer " + token})
}

// TestTenants: an agent's session is another agent's 404 for every route
// (read, assess, resume, delete) and missing from its list; the operator
// lists, reads, resumes and deletes it.
func TestTenants(t *testing.T) {
	ts := newTenantServer(t)
	id := ts.create("Pay the bill") // agent a
	own := func(token string) []string {
		code, body := ts.as(token, "GET", "/v1/sessions", nil)
		if code != 200 {
			t.Fatalf("list: %d %s", code, body)
		}
		var ids []string
		for _, s := range decode[SessionList](t, body).Sessions {
			ids = append(ids, s.ID+"/"+s.Owner)
		}
		return ids
	}
	idB := func() string {
		code, body := ts.as(agentB, "POST", "/v1/sessions", map[string]any{"user_prompt": "b's task"})
		if code != 201 {
			t.Fatalf("create as b: %d %s", code, body)
		}
		return decode[map[string]string](t, body)["id"]
	}()
	if code, body := ts.as(agentA, "POST", "/v1/sessions/"+id+"/assess", assessBody("send_money", `{}`, nil)); code != 200 || decode[AssessResponse](t, body).Decision != DecisionBlock {
		t.Fatalf("a's block: %d %s", code, body)
	}

	for _, c := range []struct {
		name, method, path string
		body               any
	}{
		{"read", "GET", "/v1/sessions/" + id, nil},
		{"assess", "POST", "/v1/sessions/" + id + "/assess", assessBody("read_file", `{}`, str("x"))},
		{"resume", "POST", "/v1/sessions/" + id + "/resume", nil},
		{"delete", "DELETE", "/v1/sessions/" + id, nil},
	} {
		code, body := ts.as(agentB, c.method, c.path, c.body)
		if code != 404 || decode[ErrorBody](t, body).Error.Code != "unknown_session" {
			t.Errorf("b may not %s a's session: %d %s", c.name, code, body)
		}
	}
	if got := own(agentA); len(got) != 1 || got[0] != id+"/a" {
		t.Errorf("a lists %v", got)
	}
	if got := own(agentB); len(got) != 1 || got[0] != idB+"/b" {
		t.Errorf("b lists %v", got)
	}
	if got := own(operator); len(got) != 2 {
		t.Errorf("the operator lists %v", got)
	}
	// Nothing b did changed a's session.
	code, body := ts.as(operator, "GET", "/v1/sessions/"+id, nil)
	if v := decode[SessionView](t, body); code != 200 || v.Owner != "a" || v.Status != StatusBlocked || v.StepCount != 1 {
		t.Fatalf("the operator reads a's session: %d %s", code, body)
	}
	if code, body := ts.as(operator, "POST", "/v1/sessions/"+id+"/resume", nil); code != 200 {
		t.Errorf("the operator resumes: %d %s", code, body)
	}
	if code, body := ts.as(agentA, "POST", "/v1/sessions/"+id+"/assess", assessBody("read_file", `{}`, str("ok"))); code != 200 {
		t.Errorf("a goes on after the resume: %d %s", code, body)
	}
	if code, body := ts.as(operator, "DELETE", "/v1/sessions/"+idB, nil); code != 204 {
		t.Errorf("the operator deletes b's session: %d %s", code, body)
	}
	if code, _ := ts.as("not-a-token-0123456789", "GET", "/v1/sessions", nil); code != 401 {
		t.Errorf("list with a wrong token: %d", code)
	}
}

// TestOnlyAnOperatorResumes: resuming a blocked session is an operator's
// act. An agent's token may not resume a session, its own included (an
// agent hijacked by an injected instruction holds its own token): 403
// operator_only, and another's session stays 404; the session stays
// blocked. An operator's token resumes it, and Server.Resume refuses an
// agent as the route does.
func TestOnlyAnOperatorResumes(t *testing.T) {
	ts := newTenantServer(t)
	id := ts.create("Pay the bill") // agent a
	if code, body := ts.as(agentA, "POST", "/v1/sessions/"+id+"/assess", assessBody("send_money", `{}`, nil)); code != 200 || decode[AssessResponse](t, body).Decision != DecisionBlock {
		t.Fatalf("a's block: %d %s", code, body)
	}
	code, body := ts.as(agentA, "POST", "/v1/sessions/"+id+"/resume", nil)
	if e := decode[ErrorBody](t, body).Error; code != 403 || e.Code != "operator_only" || !strings.Contains(e.Message, "its own included") {
		t.Errorf("a resumes its own session: %d %s", code, body)
	}
	if code, body := ts.as(agentB, "POST", "/v1/sessions/"+id+"/resume", nil); code != 404 || decode[ErrorBody](t, body).Error.Code != "unknown_session" {
		t.Errorf("b resumes a's session: %d %s", code, body)
	}
	err := ts.srv.Resume(Principal{Name: "a", Role: RoleAgent}, id)
	if ae, ok := err.(*APIError); !ok || ae.Status != 403 || ae.Code != "operator_only" {
		t.Errorf("Server.Resume as an agent: %v", err)
	}
	if sess, _ := ts.store.Get(id); sess.Status != StatusBlocked || len(sess.Resumes) != 0 {
		t.Fatalf("after the agents' tries: %+v", sess)
	}
	if code, body := ts.as(agentA, "POST", "/v1/sessions/"+id+"/assess", assessBody("read_file", `{}`, str("x"))); code != 409 || decode[ErrorBody](t, body).Error.Code != "session_blocked" {
		t.Errorf("a's step after its own resume was refused: %d %s", code, body)
	}
	if code, body := ts.as(operator, "POST", "/v1/sessions/"+id+"/resume", nil); code != 200 || decode[SessionView](t, body).Status != StatusActive {
		t.Errorf("the operator resumes: %d %s", code, body)
	}
	if code, body := ts.as(agentA, "POST", "/v1/sessions/"+id+"/assess", assessBody("send_money", `{}`, str("ok"))); code != 200 {
		t.Fatalf("a's next step: %d %s", code, body)
	}
	if err := ts.srv.Resume(Principal{Name: "op", Role: RoleOperator}, id); err != nil {
		t.Errorf("Server.Resume as an operator: %v", err)
	}
}

// TestPerTenantLimits: serve.max_sessions_per_tenant and
// serve.max_state_bytes_per_tenant bound each tenant's (session owner's)
// sessions and stored bytes apart: one agent filling its own gets 429 or
// 507 naming the limit and its name, for creates and steps, while another
// agent goes on; deleting makes room; what each tenant holds is counted
// the same afresh from the file. Both are off by default.
func TestPerTenantLimits(t *testing.T) {
	if c := DefaultConfig(); c.MaxSessionsPerTenant != 0 || c.MaxStateBytesPerTenant != 0 {
		t.Fatalf("defaults %d, %d: want both off", c.MaxSessionsPerTenant, c.MaxStateBytesPerTenant)
	}
	cfg := DefaultConfig()
	cfg.MaxSessionsPerTenant = 2
	ts := newTenantServerConfig(t, cfg)
	createAs := func(token, prompt string) (int, []byte) {
		return ts.as(token, "POST", "/v1/sessions", map[string]any{"user_prompt": prompt})
	}
	a1, _ := createAs(agentA, "a1")
	a2, _ := createAs(agentA, "a2")
	if a1 != 201 || a2 != 201 {
		t.Fatalf("a's two sessions: %d %d", a1, a2)
	}
	code, body := createAs(agentA, "a3")
	if e := decode[ErrorBody](t, body).Error; code != 429 || e.Code != "too_many_sessions" || !strings.Contains(e.Message, `tenant "a" holds 2 sessions, the most serve.max_sessions_per_tenant allows (2)`) {
		t.Errorf("a's third session: %d %s", code, body)
	}
	if code, body := createAs(agentB, "b1"); code != 201 {
		t.Errorf("b's first session: %d %s", code, body)
	}
	ids := func(token string) []string {
		_, body := ts.as(token, "GET", "/v1/sessions", nil)
		var out []string
		for _, s := range decode[SessionList](t, body).Sessions {
			out = append(out, s.ID)
		}
		return out
	}
	ts.as(agentA, "DELETE", "/v1/sessions/"+ids(agentA)[0], nil)
	if code, body := createAs(agentA, "a3"); code != 201 {
		t.Errorf("a's session after a delete: %d %s", code, body)
	}

	cfg = DefaultConfig()
	cfg.MaxStateBytesPerTenant = 1 << 20
	ts = newTenantServerConfig(t, cfg)
	big := strings.Repeat("x", 300_000)
	for i := 0; ; i++ {
		code, body := createAs(agentA, big)
		if code == 507 {
			if e := decode[ErrorBody](t, body).Error; e.Code != "state_full" || !strings.Contains(e.Message, `serve.max_state_bytes_per_tenant allows 1048576`) || !strings.Contains(e.Message, `tenant "a"`) {
				t.Errorf("a full: %s", body)
			}
			if i != 3 {
				t.Errorf("%d sessions of 300 KB fit in a's 1 MiB", i)
			}
			break
		}
		if code != 201 || i > 4 {
			t.Fatalf("a's session %d: %d %s", i, code, body)
		}
	}
	if code, body := createAs(agentB, big); code != 201 {
		t.Fatalf("b's session beside a full tenant: %d %s", code, body)
	}
	// A step that would take a past its bytes is refused at commit; b's runs.
	step := assessBody("read_file", `{}`, nil)
	step["user_messages"] = []string{strings.Repeat("y", 200_000)}
	aID, bID := ids(agentA)[0], ids(agentB)[0]
	code, body = ts.as(agentA, "POST", "/v1/sessions/"+aID+"/assess", step)
	if e := decode[ErrorBody](t, body).Error; code != 507 || !strings.Contains(e.Message, "serve.max_state_bytes_per_tenant") {
		t.Errorf("a's step past its limit: %d %s", code, body)
	}
	if code, body := ts.as(agentB, "POST", "/v1/sessions/"+bID+"/assess", step); code != 200 {
		t.Errorf("b's step: %d %s", code, body)
	}
	ua, ub := ts.store.UsageOf("a"), ts.store.UsageOf("b")
	if ua.Sessions != 3 || ua.Bytes > 1<<20 || ub.Sessions != 1 || ub.Bytes < 500_000 || ts.store.Usage() != (store.Usage{Sessions: 4, Bytes: ua.Bytes + ub.Bytes}) {
		t.Errorf("usage a %+v, b %+v, all %+v", ua, ub, ts.store.Usage())
	}
}

// TestATenantsSessionsShareOneFairShare: an agent's sessions count
// together for serve.max_session_share, so that an agent cannot take more
// of the guard by spreading expensive steps over sessions: a fresh session
// of an agent whose other sessions used more than the share (in steps
// costlier than the others') waits, or is 429 over_share past its
// deadline, while another agent's session runs. An operator's sessions
// (the single token of --token-file) count one by one, as before.
func TestATenantsSessionsShareOneFairShare(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DeadlineS = 1
	ts := newTenantServerConfig(t, cfg)
	create := func(token string) *Session {
		code, body := ts.as(token, "POST", "/v1/sessions", map[string]any{"user_prompt": "t"})
		if code != 201 {
			t.Fatalf("create: %d %s", code, body)
		}
		sess, err := ts.store.Get(decode[map[string]string](t, body)["id"])
		if err != nil {
			t.Fatal(err)
		}
		return sess
	}
	a1, a2, fresh, b := create(agentA), create(agentA), create(agentA), create(agentB)
	op1, op2 := create(operator), create(operator)
	if k := ts.srv.shareKey(a1); k != ts.srv.shareKey(fresh) || k == ts.srv.shareKey(b) {
		t.Errorf("share keys: a %q, a's fresh %q, b %q", k, ts.srv.shareKey(fresh), ts.srv.shareKey(b))
	}
	if ts.srv.shareKey(op1) == ts.srv.shareKey(op2) {
		t.Errorf("an operator's sessions share the key %q", ts.srv.shareKey(op1))
	}
	now := time.Now()
	for i := 0; i < 10; i++ {
		ts.srv.batcher.shares.charge(now, ts.srv.shareKey(b), 0.3)
	}
	ts.srv.batcher.shares.charge(now, ts.srv.shareKey(a1), 1.5) // each within the share, together past it
	ts.srv.batcher.shares.charge(now, ts.srv.shareKey(a2), 1.5)
	code, body := ts.as(agentA, "POST", "/v1/sessions/"+fresh.ID+"/assess", assessBody("read_file", `{}`, nil))
	if e := decode[ErrorBody](t, body).Error; code != 429 || e.Code != "over_share" || !strings.Contains(e.Message, "this tenant's sessions used more than serve.max_session_share (0.25)") {
		t.Errorf("a's fresh session: %d %s", code, body)
	}
	if code, body := ts.as(agentB, "POST", "/v1/sessions/"+b.ID+"/assess", assessBody("read_file", `{}`, nil)); code != 200 {
		t.Errorf("b's session: %d %s", code, body)
	}
}
