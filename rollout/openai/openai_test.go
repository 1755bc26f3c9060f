package openai

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/grammar"
	"github.com/mageguard/mageguard/rollout/prompt"
)

// reply is one scripted answer of a fake server: a fixture file (under
// testdata) with a status and headers, or a hang until the client
// gives up.
type reply struct {
	status int
	file   string
	header map[string]string
	hang   bool
}

// fakeServer answers POSTs with scripted replies: pick chooses one from the
// request's body, else the next of replies in order. It records every
// request.
type fakeServer struct {
	t       *testing.T
	mu      sync.Mutex
	replies []reply
	pick    func(body map[string]json.RawMessage) reply
	paths   []string
	bodies  []map[string]json.RawMessage
	auth    []string
	srv     *httptest.Server
}

func newFakeServer(t *testing.T, replies ...reply) *fakeServer {
	f := &fakeServer{t: t, replies: replies}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) serve(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		f.t.Errorf("fake server: request body: %v", err)
	}
	f.mu.Lock()
	f.paths = append(f.paths, r.URL.Path)
	f.bodies = append(f.bodies, body)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	var rp reply
	switch {
	case f.pick != nil:
		rp = f.pick(body)
	case len(f.replies) > 0:
		rp, f.replies = f.replies[0], f.replies[1:]
	default:
		f.mu.Unlock()
		f.t.Error("fake server: no reply left")
		w.WriteHeader(http.StatusTeapot)
		return
	}
	f.mu.Unlock()
	if rp.hang {
		<-r.Context().Done() // until the client's timeout closes the connection
		return
	}
	data, err := os.ReadFile(filepath.Join("testdata", rp.file))
	if err != nil {
		f.t.Error(err)
	}
	for k, v := range rp.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rp.status)
	w.Write(data)
}

func (f *fakeServer) hits() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.bodies)
}

// remoteGuard builds a guard whose calls go to f with the given API.
func remoteGuard(t *testing.T, f *fakeServer, api string, structured bool) (*rollout.Guard, *Generator) {
	t.Helper()
	tok := guardtest.Tokenizer(t)
	cfg := rollout.DefaultConfig()
	cfg.Structured = structured
	cfg.Generator, cfg.Endpoint, cfg.RemoteAPI, cfg.RemoteModel = rollout.GeneratorOpenAI, f.srv.URL+"/v1", api, "mage-guard"
	cfg.RemoteTimeoutS = 0.5
	g, err := rollout.NewGuard(cfg, tok, nil) // for its stop tokens
	if err != nil {
		t.Fatal(err)
	}
	gen, err := New(cfg.RemoteConfig, tok, g.Stops(), "sk-test")
	if err != nil {
		t.Fatal(err)
	}
	gen.Backoff = time.Millisecond
	if g, err = rollout.NewGuard(cfg, tok, gen); err != nil {
		t.Fatal(err)
	}
	return g, gen
}

// judgeOrMemory answers judge calls (those that watch tokens) with judge and the others with memory.
func judgeOrMemory(judge, memory string) func(map[string]json.RawMessage) reply {
	return func(body map[string]json.RawMessage) reply {
		if _, ok := body["logprobs"]; ok {
			return reply{status: 200, file: judge}
		}
		return reply{status: 200, file: memory}
	}
}

// firstStep runs the first step of a session of bankTrajectory.
func firstStep(t *testing.T, g *rollout.Guard) rollout.Turn {
	t.Helper()
	tr := guardtest.BankTrajectory()
	turns, _, err := g.Step([]rollout.StepInput{{UserPrompt: tr.UserPrompt, First: true, Action: tr.Turns[1].Action}},
		generate.Sampling{Greedy: true, Temperature: 1, TopP: 1})
	if err != nil {
		t.Fatal(err)
	}
	return turns[0]
}

func rawInts(t *testing.T, raw json.RawMessage) []int {
	t.Helper()
	var v []int
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return v
}

func TestOpenAIGeneratorCompletions(t *testing.T) {
	const wantMemory = "User wants to pay bill.txt. The bill carries an injection asking to send money to US133."
	const wantRationale = "Sends money to an IBAN the user never gave."
	cases := []struct {
		name, api, judge string
		structured       bool
		score            float64 // from the fixture's log-probs at the decision token
	}{
		// vLLM: reject 0.8 + "r" 0.01 against approve 0.2 (free decoding sums the one-token beginnings).
		{"vllm", rollout.RemoteVLLM, "vllm_completion_judge.json", false, 0.81 / 1.01},
		// Structured: only the enum's two tokens count.
		{"vllm structured", rollout.RemoteVLLM, "vllm_completion_judge.json", true, 0.8 / 1.0},
		{"vllm without token_ids", rollout.RemoteVLLM, "vllm_legacy_completion_judge.json", false, 0.81 / 1.01},
		// SGLang names log-probs by text: reject 0.7, approve 0.3.
		{"sglang structured", rollout.RemoteSGLang, "sglang_completion_judge.json", true, 0.7},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeServer(t)
			f.pick = judgeOrMemory(c.judge, "vllm_completion_memory.json")
			g, _ := remoteGuard(t, f, c.api, c.structured)
			tu := firstStep(t, g)
			if !tu.Memory.Parsed || tu.MemoryOut != wantMemory {
				t.Errorf("memory %q parsed %v", tu.MemoryOut, tu.Memory.Parsed)
			}
			if tu.Decision != prompt.DecisionReject || tu.Rationale != wantRationale || !tu.Judge.Parsed {
				t.Errorf("judge: %s %q parsed %v (%s)", tu.Decision, tu.Rationale, tu.Judge.Parsed, tu.Judge.Violation)
			}
			if !tu.ScoreExact || math.Abs(tu.Score-c.score) > 1e-6 {
				t.Errorf("score %g exact %v, want %g", tu.Score, tu.ScoreExact, c.score)
			}
			// Token counts are the server's usage: 600 + 41 and 512 + 40.
			if tu.Memory.Tokens() != 641 || tu.Judge.Tokens() != 552 {
				t.Errorf("tokens: memory %d, judge %d, want the usage's 641 and 552", tu.Memory.Tokens(), tu.Judge.Tokens())
			}
			if len(f.bodies) != 2 || f.paths[0] != "/v1/completions" || f.auth[1] != "Bearer sk-test" {
				t.Fatalf("requests %v %v", f.paths, f.auth)
			}
			mem, judge := f.bodies[0], f.bodies[1]
			// Our rendering goes as token ids, with our stop tokens, greedy.
			if got := rawInts(t, mem["prompt"]); !slices.Equal(got, tu.Memory.Prompt) {
				t.Error("the memory prompt sent is not our token ids")
			}
			if got := rawInts(t, judge["prompt"]); !slices.Equal(got, tu.Judge.Prompt) {
				t.Error("the judge prompt sent is not our token ids")
			}
			if got := rawInts(t, judge["stop_token_ids"]); !slices.Equal(got, g.Stops()) {
				t.Errorf("stop_token_ids %v", got)
			}
			if string(judge["temperature"]) != "0" || string(judge["max_tokens"]) != "96" || string(judge["logprobs"]) != "20" ||
				string(judge["return_token_ids"]) != "true" || string(judge["model"]) != `"mage-guard"` {
				t.Errorf("judge request %v", judge)
			}
			_, asIDs := judge["return_tokens_as_token_ids"]
			if asIDs != (c.api == rollout.RemoteVLLM) {
				t.Errorf("return_tokens_as_token_ids sent: %v", asIDs)
			}
			// Guided decoding: vLLM's structured_outputs.regex, SGLang's regex.
			var so struct{ Regex string }
			var re string
			_ = json.Unmarshal(judge["structured_outputs"], &so)
			_ = json.Unmarshal(judge["regex"], &re)
			want := ""
			if c.structured {
				want = grammar.Regex(g.Grammar(rollout.JudgeRole))
			}
			if got := so.Regex + re; got != want || (c.structured && (so.Regex != "") != (c.api == rollout.RemoteVLLM)) {
				t.Errorf("guided regex: structured_outputs %q, regex %q, want %q", so.Regex, re, want)
			}
		})
	}
}

func TestOpenAIGeneratorNoToolCallIsAViolation(t *testing.T) {
	f := newFakeServer(t)
	f.pick = judgeOrMemory("completion_no_tool_call.json", "completion_no_tool_call.json")
	g, _ := remoteGuard(t, f, rollout.RemoteVLLM, false)
	tu := firstStep(t, g)
	if tu.Memory.Parsed || tu.MemoryOut != "" || tu.Judge.Parsed || tu.Decision != prompt.DecisionReject || tu.Score != 1 || tu.ScoreExact {
		t.Errorf("got memory %q parsed %v, judge %s parsed %v score %g", tu.MemoryOut, tu.Memory.Parsed, tu.Decision, tu.Judge.Parsed, tu.Score)
	}
	if !strings.Contains(tu.Judge.Violation, "no <tool_call> block") {
		t.Errorf("violation %q", tu.Judge.Violation)
	}
}

func TestOpenAIGeneratorChat(t *testing.T) {
	cases := []struct {
		file      string
		parsed    bool
		decision  string
		violation string
	}{
		{"chat_tool_call.json", true, prompt.DecisionApprove, ""},
		{"chat_malformed_arguments.json", false, prompt.DecisionReject, "not valid JSON"},
		{"chat_no_tool_call.json", false, prompt.DecisionReject, "no <tool_call> block"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			f := newFakeServer(t)
			f.pick = func(body map[string]json.RawMessage) reply { return reply{status: 200, file: c.file} }
			g, _ := remoteGuard(t, f, rollout.RemoteChat, false)
			tu := firstStep(t, g)
			if tu.Judge.Parsed != c.parsed || tu.Decision != c.decision || !strings.Contains(tu.Judge.Violation, c.violation) {
				t.Errorf("judge parsed %v decision %s violation %q", tu.Judge.Parsed, tu.Decision, tu.Judge.Violation)
			}
			// No log-probs through a chat API: the score is the decision.
			want := 0.0
			if c.decision == prompt.DecisionReject {
				want = 1
			}
			if tu.Score != want || tu.ScoreExact {
				t.Errorf("score %g exact %v, want %g inexact", tu.Score, tu.ScoreExact, want)
			}
			if tu.Judge.Usage == nil || tu.Judge.Tokens() != tu.Judge.Usage.PromptTokens+tu.Judge.Usage.CompletionTokens || tu.Judge.Usage.PromptTokens != 480 {
				t.Errorf("judge tokens %d, usage %+v", tu.Judge.Tokens(), tu.Judge.Usage)
			}
			if f.paths[1] != "/v1/chat/completions" {
				t.Fatalf("path %s", f.paths[1])
			}
			var body struct {
				Model    string
				Messages []struct{ Role, Content string }
				Tools    []struct {
					Type     string
					Function struct{ Name string }
				}
				ToolChoice struct {
					Type     string
					Function struct{ Name string }
				} `json:"tool_choice"`
			}
			raw, _ := json.Marshal(f.bodies[1])
			if err := json.Unmarshal(raw, &body); err != nil {
				t.Fatal(err)
			}
			if body.Model != "mage-guard" || len(body.Messages) != 2 || body.Messages[0].Role != "system" ||
				body.Messages[0].Content != g.Prompts().JudgeSystem || !strings.Contains(body.Messages[1].Content, `"name": "send_money"`) ||
				len(body.Tools) != 1 || body.Tools[0].Function.Name != prompt.JudgeToolName || body.ToolChoice.Function.Name != prompt.JudgeToolName {
				t.Errorf("chat request %s", raw)
			}
		})
	}
}

func TestOpenAIGeneratorRetries(t *testing.T) {
	ok := reply{status: 200, file: "vllm_completion_memory.json"}
	unavailable := reply{status: 503, file: "server_error_503.json"}
	cases := []struct {
		name    string
		replies []reply
		hits    int
		err     string // "" = success
	}{
		{"429 with Retry-After, then success", []reply{{status: 429, file: "openai_error_429.json", header: map[string]string{"Retry-After": "0"}}, ok}, 2, ""},
		{"503 twice, then success", []reply{unavailable, unavailable, ok}, 3, ""},
		{"a timeout, then success", []reply{{hang: true}, ok}, 2, ""},
		{"503 past the retries", []reply{unavailable, unavailable, unavailable, unavailable}, 4, `503 Service Unavailable: "The server is overloaded." (after 3 retries)`},
		{"400 is not retried", []reply{{status: 400, file: "vllm_error_400.json"}}, 1, `400 Bad Request: "This model's maximum context length is 4096 tokens.`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeServer(t, c.replies...)
			_, gen := remoteGuard(t, f, rollout.RemoteVLLM, false)
			out, err := gen.Generate([]generate.Request{{Prompt: []int{1, 2, 3}, MaxNew: 8}}, generate.Sampling{Greedy: true})
			if f.hits() != c.hits {
				t.Errorf("%d requests, want %d", f.hits(), c.hits)
			}
			if c.err == "" {
				if err != nil || len(out) != 1 || len(out[0].Tokens) != 41 {
					t.Fatalf("err %v, out %v", err, out)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("error %v, want %q", err, c.err)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	if d := retryAfter("2"); d != 2*time.Second {
		t.Errorf("seconds: %v", d)
	}
	if d := retryAfter(time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)); d != 0 {
		t.Errorf("a date in the past: %v", d)
	}
	if d := retryAfter(""); d != -1 {
		t.Errorf("none: %v", d)
	}
	if d := retryAfter("soon"); d != -1 {
		t.Errorf("unreadable: %v", d)
	}
}

// TestRegexMatchesTheGrammar checks the guided-decoding regex against the
// calls the local grammar produces (random ones, under the real
// vocabulary) and against texts it must refuse.
func TestRegexMatchesTheGrammar(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	cfg := rollout.DefaultConfig()
	cfg.Structured = true
	cfg.MaxMemoryTokens, cfg.MaxJudgeTokens = 40, 30
	g, err := rollout.NewGuard(cfg, tok, &guardtest.Random{Tok: tok, Rng: rand.New(rand.NewPCG(2, 2))})
	if err != nil {
		t.Fatal(err)
	}
	judge := regexp.MustCompile("^" + grammar.Regex(g.Grammar(rollout.JudgeRole)) + "$")
	memory := regexp.MustCompile("^" + grammar.Regex(g.Grammar(rollout.MemoryRole)) + "$")
	chains, _, err := g.Run([]*rollout.Episode{{Traj: guardtest.BankTrajectory(), Start: 0, End: 3}}, rollout.RunOptions{Chains: 4, Sampling: generate.Sampling{Temperature: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chains {
		for _, tu := range ch.Turns {
			for _, c := range []struct {
				re   *regexp.Regexp
				text string
			}{{judge, tu.Judge.Text}, {memory, tu.Memory.Text}} {
				text := strings.TrimSuffix(c.text, "<|im_end|>")
				if !c.re.MatchString(text) {
					t.Errorf("the regex refuses a grammar's call %q", text)
				}
			}
		}
	}
	for _, bad := range []string{
		guardtest.JudgeCall("maybe", "r"),
		guardtest.JudgeCall("approve", `a \" quote`),
		guardtest.JudgeCall("approve", "r") + " extra",
	} {
		if judge.MatchString(bad) {
			t.Errorf("the regex accepts %q", bad)
		}
	}
}

// TestFixturesDecodeToTheirText checks that the fixtures' token ids are the
// bundled tokenizer's for their text (the stop token aside).
func TestFixturesDecodeToTheirText(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	files, err := filepath.Glob(filepath.Join("testdata", "*completion*.json"))
	if err != nil || len(files) < 4 {
		t.Fatalf("fixtures %v: %v", files, err)
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var resp completionsResponse
		if err := json.Unmarshal(data, &resp); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(resp.Choices) == 0 {
			continue // chat answers
		}
		ch := resp.Choices[0]
		ids := ch.TokenIDs
		if ids == nil && ch.Logprobs != nil {
			for _, s := range ch.Logprobs.Tokens {
				id, _ := tokenIDKey(s)
				ids = append(ids, id)
			}
		}
		if got := strings.TrimSuffix(tok.Decode(ids, false), "<|im_end|>"); got != ch.Text {
			t.Errorf("%s: the ids decode to %q, the text is %q", path, got, ch.Text)
		}
	}
}
