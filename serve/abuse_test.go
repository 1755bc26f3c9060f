package serve

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
)

// poisoned fails every generation call that holds a prompt naming the
// tool "poison" (a step the model cannot run), and passes the others on.
type poisoned struct{ *fakeModel }

func (p poisoned) Generate(reqs []generate.Request, s generate.Sampling) ([]generate.Completion, error) {
	for _, r := range reqs {
		if strings.Contains(p.Tok.Decode(r.Prompt, false), `"name": "poison"`) {
			return nil, errors.New("the model cannot run this prompt")
		}
	}
	return p.fakeModel.Generate(reqs, s)
}

// batchOf sends the bodies as steps of new sessions while the worker is
// held, so that they form one batch, then lets it go; it returns each
// step's status and body.
func batchOf(t *testing.T, ts *testServer, bodies ...map[string]any) ([]int, [][]byte) {
	t.Helper()
	hold := ts.create("hold the worker")
	ids := make([]string, len(bodies))
	for i := range ids {
		ids[i] = ts.create("task")
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ts.do("POST", "/v1/sessions/"+hold+"/assess", assessBody("read_file", `{}`, nil))
	}()
	<-ts.model.entered
	codes, out := make([]int, len(bodies)), make([][]byte, len(bodies))
	for i := range bodies {
		wg.Add(1)
		go func() { defer wg.Done(); codes[i], out[i] = ts.do("POST", "/v1/sessions/"+ids[i]+"/assess", bodies[i]) }()
	}
	guardtest.WaitFor(t, "the queued steps", func() bool { return ts.srv.batcher.queued() == len(bodies) })
	ts.open()
	wg.Wait()
	return codes, out
}

// TestOneBadStepNeverFailsItsBatch: a step whose prompt is too long is
// refused 413 alone before it reaches a batch; a step the generator
// cannot run fails alone (500) while the step batched beside it is
// answered as it is alone. Before, both failed with 500.
func TestOneBadStepNeverFailsItsBatch(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BatchSize, cfg.MaxWaitMS, cfg.MaxPromptTokens = 8, 50, 2000
	ts := newTestServer(t, cfg, true)
	guard, err := rollout.NewGuard(rollout.DefaultConfig(), ts.model.Tok, poisoned{ts.model})
	if err != nil {
		t.Fatal(err)
	}
	ts.srv.SetGuard(guard)

	long := assessBody("read_file", `{}`, nil)
	long["user_messages"] = []string{strings.Repeat("pay now ", 1000), strings.Repeat("right now ", 1000)}
	id := ts.create("t")
	code, body := ts.do("POST", "/v1/sessions/"+id+"/assess", long)
	if e := decode[ErrorBody](t, body).Error; code != 413 || e.Code != "prompt_too_long" || !strings.Contains(e.Message, "serve.max_prompt_tokens (2000)") {
		t.Errorf("a too long step: %d %s", code, body)
	}
	calls := len(ts.model.calls())
	codes, out := batchOf(t, ts, assessBody("poison", `{}`, nil), assessBody("read_file", `{"file": "a"}`, nil))
	if codes[0] != 500 || decode[ErrorBody](t, out[0]).Error.Code != "generation_failed" {
		t.Errorf("the bad step: %d %s", codes[0], out[0])
	}
	if codes[1] != 200 || decode[AssessResponse](t, out[1]).Decision != DecisionAllow {
		t.Errorf("the step beside it: %d %s", codes[1], out[1])
	}
	// After the hold step's two calls: the pair's memory call ran and its
	// judge call failed (the poison is in the judge's prompt); then each
	// alone: the bad step's memory call ran and its judge call failed, the
	// good step ran both.
	if got := ts.model.calls()[calls+2:]; !slices.Equal(got, []int{2, 1, 1, 1}) {
		t.Errorf("generation calls %v, want [2 1 1 1]", got)
	}
}

// TestLongActionsAreElidedInServe: a 60 KB action (an array of 30,000
// numbers) and a 750,000-character user request, which before failed
// every step, are elided as in eval and answered.
func TestLongActionsAreElidedInServe(t *testing.T) {
	ts := newTestServer(t, DefaultConfig(), false)
	id := ts.create(strings.Repeat("a long request ", 50_000))
	numbers := "[" + strings.Repeat("1234,", 30_000) + "1]"
	code, body := ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("read_file", `{"ids": `+numbers+`}`, nil))
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	code, body = ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("read_file", `{"ids": `+numbers+`}`, str("ok")))
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if a := decode[AssessResponse](t, body); a.Tokens > 2*(8192+96+256) {
		t.Errorf("the step read %d tokens", a.Tokens)
	}
}

// TestInvalidTextIsRefusedNamingTheField: invalid UTF-8 or an escaped lone
// surrogate in any string of a request is a 400 naming the field, never
// stored (before, it became U+FFFD in an observation and stayed raw in the
// arguments, served back as invalid JSON).
func TestInvalidTextIsRefusedNamingTheField(t *testing.T) {
	ts := newTestServer(t, DefaultConfig(), false)
	id := ts.create("t")
	cases := []struct{ path, body, field string }{
		{"/v1/sessions", "{\"user_prompt\": \"pay \xff\"}", "user_prompt"},
		{"/v1/sessions", `{"user_prompt": "pay", "tools": [{"name": "f\ud800"}]}`, "tools[0].name"},
		{"/v1/sessions/" + id + "/assess", "{\"action\": {\"name\": \"f\", \"arguments\": {\"to\": \"a\xc3\"}}}", "action.arguments.to"},
		{"/v1/sessions/" + id + "/assess", `{"action": {"name": "f", "arguments": {"to": ["x", "\udc00"]}}}`, "action.arguments.to[1]"},
		{"/v1/sessions/" + id + "/assess", "{\"action\": {\"name\": \"f\"}, \"observation\": \"\xfe\"}", "observation"},
		{"/v1/sessions/" + id + "/assess", "{\"action\": {\"name\": \"f\"}, \"user_messages\": [\"ok\", \"\xfe\"]}", "user_messages[1]"},
	}
	for _, c := range cases {
		code, body := ts.do("POST", c.path, c.body)
		e := decode[ErrorBody](t, body).Error
		if code != 400 || e.Code != "invalid_value" || e.Field != c.field || !strings.Contains(e.Message, "holds") {
			t.Errorf("%q: %d %s, want 400 naming %s", c.body, code, body, c.field)
		}
	}
}

// TestARetryWithAnotherBodyIs409: a retried step (same index) whose
// observation or user messages differ from the stored step's is 409
// step_conflict naming what differs; the same body gets the stored answer.
func TestARetryWithAnotherBodyIs409(t *testing.T) {
	ts := newTestServer(t, DefaultConfig(), false)
	id := ts.create("t")
	ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("read_file", `{}`, nil))
	step1 := assessBody("get_balance", `{}`, str("Bill: 98.70"))
	step1["step"], step1["user_messages"] = 1, []string{"thanks"}
	code, first := ts.do("POST", "/v1/sessions/"+id+"/assess", step1)
	if code != 200 {
		t.Fatalf("%d %s", code, first)
	}
	if code, again := ts.do("POST", "/v1/sessions/"+id+"/assess", step1); code != 200 || string(again) != string(first) {
		t.Errorf("the same retry: %d %s", code, again)
	}
	for field, change := range map[string]func(map[string]any){
		"observation":   func(b map[string]any) { b["observation"] = "Bill: 9870.00" },
		"user_messages": func(b map[string]any) { b["user_messages"] = []string{"thanks", "and pay it twice"} },
	} {
		b := assessBody("get_balance", `{}`, str("Bill: 98.70"))
		b["step"], b["user_messages"] = 1, []string{"thanks"}
		change(b)
		code, body := ts.do("POST", "/v1/sessions/"+id+"/assess", b)
		if e := decode[ErrorBody](t, body).Error; code != 409 || e.Code != "step_conflict" || !strings.Contains(e.Message, "its "+field+" differs") {
			t.Errorf("a retry with another %s: %d %s", field, code, body)
		}
	}
}

// TestSessionLimits: serve.max_sessions answers 429 too_many_sessions,
// serve.max_state_bytes 507 state_full (creates and steps, a step refused
// at commit when it would take the store past the limit), each naming its
// limit; deleting sessions makes room again.
func TestSessionLimits(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxSessions = 2
	ts := newTestServer(t, cfg, false)
	a, _ := ts.create("a"), ts.create("b")
	code, body := ts.do("POST", "/v1/sessions", map[string]any{"user_prompt": "c"})
	if e := decode[ErrorBody](t, body).Error; code != 429 || e.Code != "too_many_sessions" || !strings.Contains(e.Message, "serve.max_sessions allows (2)") {
		t.Errorf("a third session: %d %s", code, body)
	}
	ts.do("DELETE", "/v1/sessions/"+a, nil)
	ts.create("c")

	cfg = DefaultConfig()
	cfg.MaxStateBytes = 1 << 20
	ts = newTestServer(t, cfg, false)
	prompt := strings.Repeat("x", 300_000)
	var ids []string
	for {
		code, body := ts.do("POST", "/v1/sessions", map[string]any{"user_prompt": prompt})
		if code == 507 {
			if e := decode[ErrorBody](t, body).Error; e.Code != "state_full" || !strings.Contains(e.Message, "serve.max_state_bytes allows 1048576") {
				t.Errorf("full: %s", body)
			}
			break
		}
		if code != 201 || len(ids) > 4 {
			t.Fatalf("create %d: %d %s", len(ids), code, body)
		}
		ids = append(ids, decode[struct{ ID string }](t, body).ID)
	}
	if len(ids) != 3 {
		t.Errorf("%d sessions of 300 KB fit in 1 MiB", len(ids))
	}
	// A step that would take the store past its limit is refused at
	// commit (507, not stored: before, it was stored and the store went
	// past the limit); a step that fits is stored.
	before := ts.store.Usage()
	big := assessBody("read_file", `{}`, nil)
	big["user_messages"] = []string{strings.Repeat("y", 200_000)}
	code, body = ts.do("POST", "/v1/sessions/"+ids[0]+"/assess", big)
	if e := decode[ErrorBody](t, body).Error; code != 507 || e.Code != "state_full" || !strings.Contains(e.Message, "serve.max_state_bytes allows 1048576") {
		t.Errorf("a step past the limit: %d %s", code, body)
	}
	if u := ts.store.Usage(); u != before {
		t.Errorf("usage %+v after a refused step, %+v before", u, before)
	}
	if code, body := ts.do("POST", "/v1/sessions/"+ids[1]+"/assess", assessBody("read_file", `{}`, nil)); code != 200 {
		t.Errorf("a step that fits: %d %s", code, body)
	}
	for i, want := range []int{0, 1} {
		if sess, _ := ts.store.Get(ids[i]); sess.StepCount != want {
			t.Errorf("session %d has %d steps, want %d", i, sess.StepCount, want)
		}
	}
	if u := ts.store.Usage(); u.Sessions != 3 || u.Bytes <= before.Bytes || u.Bytes > 1<<20 {
		t.Errorf("usage %+v", u)
	}
}

// TestIdleSessionsExpire: with serve.session_idle_s, the sessions without
// a create, step or resume for that long are deleted (a session with a
// request in progress is left alone); by default nothing expires.
func TestIdleSessionsExpire(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SessionIdleS = 3600
	ts := newTestServer(t, cfg, false)
	old, busy := ts.create("old"), ts.create("busy")
	later := time.Now().Add(2 * time.Hour)
	ts.srv.now = func() time.Time { return later }
	fresh := ts.create("fresh")
	ts.srv.claims.claim(busy)
	ts.srv.expireIdle()
	ts.srv.claims.release(busy)
	for id, want := range map[string]int{old: 404, busy: 200, fresh: 200} {
		if code, _ := ts.do("GET", "/v1/sessions/"+id, nil); code != want {
			t.Errorf("session %s: %d, want %d", id, code, want)
		}
	}
	if _, body := ts.do("GET", "/metrics", nil); !strings.Contains(string(body), "mageguard_sessions_expired_total 1\n") {
		t.Error("the expiry is not counted")
	}
	// The janitor runs on its own (every second at least).
	cfg.SessionIdleS = 0.2
	ts = newTestServer(t, cfg, false)
	id := ts.create("soon idle")
	guardtest.WaitFor(t, "the idle session to expire", func() bool { code, _ := ts.do("GET", "/v1/sessions/"+id, nil); return code == 404 })
	// Off by default.
	ts = newTestServer(t, DefaultConfig(), false)
	ts.srv.now = func() time.Time { return time.Now().Add(1000 * time.Hour) }
	ts.srv.expireIdle()
	if n := ts.store.Usage().Sessions; n != 0 {
		t.Errorf("%d sessions", n)
	}
}

// TestRefusalsQuoteLittle: a 900 KB unknown key is answered with an error
// of at most a few hundred bytes (before: a 1.8 MB error and log line),
// and a 900 KB body of a long key over a large array is checked in well
// under a second (before: 38 s of CPU).
func TestRefusalsQuoteLittle(t *testing.T) {
	ts := newTestServer(t, DefaultConfig(), false)
	id := ts.create("t")
	key := strings.Repeat("k", 900_000)
	code, body := ts.do("POST", "/v1/sessions/"+id+"/assess", `{"action": {"name": "f"}, "`+key+`": 1}`)
	if code != 400 || len(body) > 400 {
		t.Errorf("an unknown 900 KB key: %d, %d bytes: %.300s", code, len(body), body)
	}
	half := strings.Repeat("k", 450_000)
	slow := `{"action": {"name": "f", "arguments": {"` + half + `": [` + strings.Repeat("1,", 220_000) + `1]}}}`
	start := time.Now()
	if _, err := ParseAssess([]byte(slow)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a %d-byte body took %v to check", len(slow), took)
	}
}
