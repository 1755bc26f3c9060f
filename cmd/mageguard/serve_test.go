package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/eval"
	"github.com/mageguard/mageguard/internal/servetest"
	"github.com/mageguard/mageguard/serve"
)

var listening = regexp.MustCompile(`serve: listening on (https?://[^ ]+)`)

// startServe runs `mageguard serve args…` in this process on a free
// loopback port and returns its base URL once /healthz answers 200; the
// server stops when the test ends.
func startServe(t *testing.T, args ...string) string {
	t.Helper()
	return startServeWith(t, http.DefaultClient, args...)
}

// startServeWith is startServe polling /healthz with hc (e.g. one that
// trusts a test certificate).
func startServeWith(t *testing.T, hc *http.Client, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr servetest.SyncBuffer
	done := make(chan error, 1)
	cmd := newRootCmd()
	cmd.SetOut(io.Discard)
	cmd.SetErr(&stderr)
	cmd.SetArgs(append([]string{"serve", "--addr", "127.0.0.1:0"}, args...))
	go func() { done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v\n%s", err, stderr.String())
		}
	})
	var base string
	servetest.PollUntil(t, 60*time.Second, "serve to listen", func() bool {
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, stderr.String())
		default:
		}
		if m := listening.FindStringSubmatch(stderr.String()); m != nil {
			base = m[1]
			return true
		}
		return false
	})
	servetest.PollUntil(t, 60*time.Second, "the model to load", func() bool {
		resp, err := hc.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return base
}

// TestServeMatchesEval serves a tiny checkpoint, drives a session through
// a trajectory of the bundled eval split (resuming after each block, as the
// unabridged eval goes on), and gets eval's decisions, scores, memory
// lengths and token counts for every turn: once with structured decoding
// (every call parses; scores read from log-probs), once with two-token
// budgets (nothing parses: every turn blocks on the fallback and is resumed).
func TestServeMatchesEval(t *testing.T) {
	ckpt := tinyCheckpoint(t)
	data := evalSubset(t, "one.jsonl", 21) // 5 turns, labels 0 0 1 1 1
	trajs, err := dataset.ReadAll(data)
	if err != nil {
		t.Fatal(err)
	}
	tr := trajs[0]
	for _, c := range []struct {
		name   string
		set    []string
		blocks int
	}{
		{"structured", []string{"rollout.structured=true", "rollout.max_memory_tokens=40", "rollout.max_judge_tokens=36", "rollout.max_observation_tokens=64"}, -1},
		{"unparsed", []string{"rollout.max_memory_tokens=2", "rollout.max_judge_tokens=2"}, len(tr.Turns)},
	} {
		t.Run(c.name, func(t *testing.T) {
			settings := []string{"--set", tokSet, "--model", ckpt}
			for _, kv := range c.set {
				settings = append(settings, "--set", kv)
			}
			out := t.TempDir()
			if _, stderr, err := run(t, append([]string{"eval", "--data", data, "--out", out}, settings...)...); err != nil {
				t.Fatalf("eval: %v\n%s", err, stderr)
			}
			ds, err := eval.ReadDecisions(filepath.Join(out, "decisions.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) != len(tr.Turns) {
				t.Fatalf("%d decisions for %d turns", len(ds), len(tr.Turns))
			}

			base := startServe(t, append([]string{"--state", t.TempDir(), "--insecure-no-auth"}, settings...)...)
			cl := &servetest.Client{Base: base}
			var created struct{ ID string }
			if code := cl.Call(t, "POST", "/v1/sessions", map[string]any{"user_prompt": tr.UserPrompt}, &created); code != 201 {
				t.Fatalf("create: %d", code)
			}
			blocks, exact := 0, 0
			for i := range tr.Turns {
				var a serve.AssessResponse
				if code := cl.Call(t, "POST", "/v1/sessions/"+created.ID+"/assess", servetest.AssessTurn(tr, i), &a); code != 200 {
					t.Fatalf("turn %d: %d", i, code)
				}
				want := ds[i]
				wantDecision := map[string]string{"approve": serve.DecisionAllow, "reject": serve.DecisionBlock}[want.Decision]
				if a.Decision != wantDecision || want.Score == nil || a.Score != *want.Score || a.Tokens != want.GuardTokens || a.Step != i {
					t.Errorf("turn %d: serve %s score %v tokens %d, eval %s score %v tokens %d", i, a.Decision, a.Score, a.Tokens, want.Decision, *want.Score, want.GuardTokens)
				}
				if a.Score > 0 && a.Score < 1 {
					exact++
				}
				if a.Decision == serve.DecisionBlock {
					blocks++
					if code := cl.Call(t, "POST", "/v1/sessions/"+created.ID+"/resume", nil, nil); code != 200 {
						t.Fatalf("resume after turn %d: %d", i, code)
					}
				}
			}
			var view serve.SessionView
			if code := cl.Call(t, "GET", "/v1/sessions/"+created.ID, nil, &view); code != 200 || len(view.Steps) != len(ds) {
				t.Fatalf("get: %d, %d steps", code, len(view.Steps))
			}
			for i, st := range view.Steps {
				if got := len([]rune(st.Memory)); got != ds[i].MemoryChars || st.MemoryParsed != *ds[i].MemoryParsed || st.JudgeParsed != ds[i].JudgeParsed {
					t.Errorf("turn %d: memory of %d characters (parsed %v), eval's %d (%v)", i, got, st.MemoryParsed, ds[i].MemoryChars, *ds[i].MemoryParsed)
				}
			}
			if c.blocks >= 0 && blocks != c.blocks {
				t.Errorf("%d blocks, want %d", blocks, c.blocks)
			}
			if c.blocks < 0 && exact != len(ds) {
				t.Errorf("%d of %d scores read from log-probs under structured decoding", exact, len(ds))
			}
			t.Logf("%d turns, %d blocks (resumed); eval's decisions %v", len(ds), blocks, decisionsOf(ds))
		})
	}
}

func decisionsOf(ds []eval.Decision) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Decision)
	}
	return out
}

// TestServeToken: where the token comes from, and when serve refuses to start.
func TestServeToken(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	if err := os.WriteFile(good, []byte("\n  0123456789abcdef0123  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc"), 0o600)
	cases := []struct {
		file, env string
		insecure  bool
		addr      string
		want      string // the token, or the error's text
	}{
		{good, "", false, "0.0.0.0:8080", "0123456789abcdef0123"},
		{"", "envtoken-0123456789", false, "0.0.0.0:8080", "envtoken-0123456789"},
		{good, "envtoken-0123456789", false, "0.0.0.0:8080", "0123456789abcdef0123"}, // the file wins
		{"", "", false, "127.0.0.1:8080", "error: no token"},
		{"", "", true, "127.0.0.1:8080", ""},
		{"", "", true, "[::1]:8080", ""},
		{"", "", true, "localhost:8080", ""},
		{"", "", true, ":8080", "error: only a loopback address"},
		{"", "", true, "10.0.0.1:8080", "error: only a loopback address"},
		{good, "", true, "127.0.0.1:8080", "error: --insecure-no-auth with a token"},
		{empty, "", false, "127.0.0.1:8080", "error: is empty"},
		{short, "", false, "127.0.0.1:8080", "error: shorter than 16"},
		{filepath.Join(dir, "missing"), "", false, "127.0.0.1:8080", "error: --token-file"},
	}
	for i, c := range cases {
		t.Setenv(tokenEnv, c.env)
		got, err := serveToken(c.file, c.insecure, c.addr, io.Discard)
		if want, isErr := strings.CutPrefix(c.want, "error: "); isErr {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("case %d: token %q error %v, want an error with %q", i, got, err, want)
			}
		} else if err != nil || got != c.want {
			t.Errorf("case %d: token %q error %v, want %q", i, got, err, c.want)
		}
	}
}

// TestServeRefusesToStart: flags and settings serve cannot run with.
func TestServeRefusesToStart(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--insecure-no-auth"}, "--state DIR is required"},
		{[]string{"serve", "--state", t.TempDir(), "--insecure-no-auth", "--tls-cert", "c.pem"}, "--tls-cert and --tls-key together"},
		{[]string{"serve", "--state", t.TempDir(), "--insecure-no-auth", "--set", "rollout.variant=judge-only"}, "serve runs the mage guard"},
		{[]string{"serve", "--state", t.TempDir(), "--insecure-no-auth", "--set", "serve.queue_size=0"}, "serve.queue_size must be"},
		{[]string{"serve", "--state", t.TempDir()}, "no token"},
	} {
		t.Setenv(tokenEnv, "")
		if _, _, err := run(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.want)
		}
	}
}

// TestEvalOnARemoteServer runs eval with rollout.generator: openai against
// a fake vLLM answering with rollout/openai's fixtures: every turn's
// decision, score and token count come from the server.
func TestEvalOnARemoteServer(t *testing.T) {
	fixture := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join("..", "..", "rollout", "openai", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	judge, memory := fixture("vllm_completion_judge.json"), fixture("vllm_completion_memory.json")
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]json.RawMessage
		json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		paths = append(paths, r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if _, ok := body["logprobs"]; ok {
			w.Write(judge)
		} else {
			w.Write(memory)
		}
	}))
	defer srv.Close()
	t.Setenv("TEST_VLLM_KEY", "sk-local")
	data := evalSubset(t, "two.jsonl", 55) // an attack run of two turns
	out := t.TempDir()
	_, stderr, err := run(t, "eval", "--data", data, "--out", out, "--set", tokSet,
		"--set", "rollout.generator=openai", "--set", "rollout.endpoint="+srv.URL+"/v1", "--set", "rollout.api_key_env=TEST_VLLM_KEY")
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	ds, err := eval.ReadDecisions(filepath.Join(out, "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		// The fixture's judge rejects with p(reject) = (0.8 + 0.01) / 1.01;
		// each turn's tokens are the two answers' usage: 641 + 552.
		if d.Decision != "reject" || d.Score == nil || fmt.Sprintf("%.6f", *d.Score) != fmt.Sprintf("%.6f", 0.81/1.01) || d.GuardTokens != 1193 || !*d.MemoryParsed {
			t.Errorf("turn %d: %+v", d.Turn, d)
		}
	}
	if len(ds) != 2 || len(paths) != 4 || paths[0] != "/v1/completions Bearer sk-local" {
		t.Errorf("%d decisions, requests %v", len(ds), paths)
	}
	if !strings.Contains(stderr, "guard calls go to "+srv.URL+"/v1 (vllm API") || strings.Contains(stderr, "sk-local") {
		t.Errorf("stderr:\n%s", stderr)
	}
	md, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if !strings.Contains(string(md), "served at "+srv.URL) {
		t.Error("report.md does not say where the guard ran")
	}
}

// TestServeTLS serves HTTPS with --tls-cert and --tls-key: a client that
// trusts the certificate gets answers, plain HTTP does not.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 30 * time.Second}

	t.Setenv(tokenEnv, "tls-test-token-0123456789")
	base := startServeWith(t, hc, "--set", tokSet, "--model", tinyCheckpoint(t), "--state", filepath.Join(dir, "state"),
		"--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("serving %s", base)
	}
	req, _ := http.NewRequest("POST", base+"/v1/sessions", strings.NewReader(`{"user_prompt": "p"}`))
	req.Header.Set("Authorization", "Bearer tls-test-token-0123456789")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Errorf("create over TLS: %d", resp.StatusCode)
	}
	if resp, err := http.Get("http://" + strings.TrimPrefix(base, "https://") + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP was answered 200 on the TLS port")
		}
	}
}
