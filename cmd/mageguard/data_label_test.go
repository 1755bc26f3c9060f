package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// judgeStub is a local stand-in for an OpenAI chat server: it answers each
// question with the verdict its table holds for the judged action's name,
// and counts the requests.
type judgeStub struct {
	srv      *httptest.Server
	requests atomic.Int64
}

func newJudgeStub(t *testing.T, table map[string]bool) *judgeStub {
	s := &judgeStub{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role, Content string
			} `json:"messages"`
			ToolChoice struct {
				Function struct{ Name string } `json:"function"`
			} `json:"tool_choice"`
		}
		if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil || len(req.Messages) != 2 ||
			req.Model != "judge-model" || req.ToolChoice.Function.Name != "verdict" {
			http.Error(w, `{"error": {"message": "bad request"}}`, http.StatusBadRequest)
			return
		}
		_, rest, _ := strings.Cut(req.Messages[1].Content, "The action to judge:\n")
		_, rest, _ = strings.Cut(rest, "action: <data>")
		name, _, _ := strings.Cut(rest, "</data>")
		mal, ok := table[name]
		if !ok {
			http.Error(w, `{"error": {"message": "no verdict for `+name+`"}}`, http.StatusBadRequest)
			return
		}
		args, _ := json.Marshal(fmt.Sprintf(`{"malicious": %t, "reason": "stub verdict on %s"}`, mal, name))
		fmt.Fprintf(w, `{"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "verdict", "arguments": %s}}]}}], "usage": {"prompt_tokens": 10, "completion_tokens": 5}}`, args)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *judgeStub) flags() []string {
	return []string{"--set", "rollout.generator=openai", "--set", "rollout.remote_api=chat", "--set", "rollout.endpoint=" + s.srv.URL + "/v1",
		"--set", "rollout.remote_model=judge-model", "--set", "rollout.api_key_env=", "--set", "rollout.remote_retries=0"}
}

// data label asks each distinct question once, writes the verdicts and the
// disagreements; a rerun asks nothing (the cache beside --out); the output
// validates.
func TestDataLabelResumesAndWritesDisagreements(t *testing.T) {
	// The imported chat logs: read_file (a person's 0), get_balance
	// (assumed 0), send_money (a person's 1), send_email (assumed 0),
	// get_weather (assumed 0).
	table := map[string]bool{"read_file": false, "get_balance": false, "send_money": true, "send_email": true, "get_weather": false}
	stub := newJudgeStub(t, table)
	dir := t.TempDir()
	in := "../../dataset/openaichat/testdata/expected.jsonl"
	out, review := filepath.Join(dir, "labeled.jsonl"), filepath.Join(dir, "review.jsonl")
	args := append(stub.flags(), "data", "label", "--in", in, "--out", out, "--verify", review, "--concurrency", "2")
	_, errs, err := run(t, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, errs)
	}
	if n := stub.requests.Load(); n != 5 {
		t.Errorf("%d requests, want 5 (one per action)\n%s", n, errs)
	}
	if !strings.Contains(errs, "5 actions judged (5 distinct questions: 0 from the cache") || !strings.Contains(errs, "1 disagreements") {
		t.Errorf("summary: %s", errs)
	}
	first, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// send_email: assumed 0, the judge says 1.
	lines := strings.Split(strings.TrimSpace(string(first)), "\n")
	if !strings.Contains(lines[0], `"name":"send_email","arguments":{"to":"me@example.com","body":"receipt \u00e9"}},"observation":"","label":1,"label_source":"judge","label_note":"stub verdict on send_email"}`) {
		t.Errorf("send_email not relabeled: %s", lines[0])
	}
	// The people's labels stand (send_money 1, read_file 0); get_weather is the judge's 0.
	if !strings.Contains(lines[0], `"observation":"sent","label":1,"label_source":"human"}`) ||
		!strings.Contains(lines[1], `"label":0,"label_source":"judge","label_note":"stub verdict on get_weather"`) {
		t.Errorf("labels: %s", first)
	}
	rv, err := os.ReadFile(review)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if strings.Count(string(rv), "\n") != 1 || json.Unmarshal(rv, &d) != nil || d["id"] != "openai:conv-1" || d["turn"] != 3.0 ||
		d["label"] != 0.0 || d["label_source"] != "assumed" || d["judge_label"] != 1.0 || d["kept"] != "judge" {
		t.Errorf("review file: %s", rv)
	}
	if o, _, err := run(t, "data", "validate", out); err != nil || !strings.Contains(o, "ok: 3 trajectories") {
		t.Errorf("validate: %v %q", err, o)
	}

	// The rerun asks nothing and writes the same file.
	_, errs, err = run(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	if n := stub.requests.Load(); n != 5 {
		t.Errorf("the rerun made %d requests, want 0\n%s", n-5, errs)
	}
	if again, _ := os.ReadFile(out); string(again) != string(first) {
		t.Errorf("the rerun wrote another file")
	}

	// --only-unlabeled with a fresh cache: the three assumed actions.
	fresh := filepath.Join(dir, "fresh-cache.jsonl")
	_, _, err = run(t, append(stub.flags(), "data", "label", "--in", in, "--out", filepath.Join(dir, "u.jsonl"), "--cache", fresh, "--only-unlabeled")...)
	if err != nil {
		t.Fatal(err)
	}
	if n := stub.requests.Load(); n != 8 {
		t.Errorf("--only-unlabeled made %d requests, want 3", n-5)
	}
}

// data label refuses a rollout section that is not a chat server, and bad
// settings, before it reads anything.
func TestDataLabelRefusesBadSettings(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "o.jsonl")
	in := "../../dataset/openaichat/testdata/expected.jsonl"
	if _, _, err := run(t, "data", "label", "--in", in, "--out", out); err == nil || !strings.Contains(err.Error(), "rollout.remote_api: chat") {
		t.Errorf("local generator: %v", err)
	}
	stub := newJudgeStub(t, nil)
	if _, _, err := run(t, append(stub.flags(), "data", "label", "--in", in, "--out", out, "--retries", "-1")...); err == nil || !strings.Contains(err.Error(), "retries must be in [0, 20]") {
		t.Errorf("--retries -1: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "judge-cache.jsonl")); !os.IsNotExist(err) {
		t.Errorf("a refused run made a cache file")
	}
	if stub.requests.Load() != 0 {
		t.Errorf("a refused run asked the judge")
	}
}
