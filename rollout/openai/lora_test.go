package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
)

// TestLoRAUpdates: LoadLoRA and UnloadLoRA post to vLLM's paths under the endpoint and to
// SGLang's at the server's root, with the adapter's name and path, and read vLLM's plain-text
// answer; SetModel makes the next completions name the adapter (vLLM: model; SGLang: lora_path,
// model the base's); with SampledLogProbs every
// request asks for log-probs and a completion without them is an error, not zeros.
func TestLoRAUpdates(t *testing.T) {
	for api, root := range map[string]string{rollout.RemoteVLLM: "/v1/", rollout.RemoteSGLang: "/"} {
		t.Run(api, func(t *testing.T) {
			var mu sync.Mutex
			var paths []string
			var bodies []map[string]any
			withLogprobs, withIDs := true, true
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				var body map[string]any
				json.NewDecoder(r.Body).Decode(&body)
				paths, bodies = append(paths, r.URL.Path), append(bodies, body)
				if strings.HasSuffix(r.URL.Path, "lora_adapter") {
					w.Write([]byte("Success: LoRA adapter added successfully."))
					return
				}
				choice := map[string]any{"text": "", "finish_reason": "stop"}
				if withIDs {
					choice["token_ids"] = []int{5, 6}
				}
				if withLogprobs {
					choice["logprobs"] = map[string]any{"token_logprobs": []float64{-0.5, -1.5}}
				}
				json.NewEncoder(w).Encode(map[string]any{"choices": []any{choice}})
			}))
			defer srv.Close()
			cfg := rollout.DefaultRemoteConfig()
			cfg.Generator, cfg.Endpoint, cfg.RemoteAPI, cfg.RemoteModel = rollout.GeneratorOpenAI, srv.URL+"/v1", api, "base"
			gen, err := New(cfg, guardtest.Tokenizer(t), nil, "")
			if err != nil {
				t.Fatal(err)
			}
			gen.SampledLogProbs = true
			ctx := context.Background()
			if err := gen.LoadLoRA(ctx, "run-step-1", "/runs/x/served/step-1"); err != nil {
				t.Fatal(err)
			}
			gen.SetModel("run-step-1")
			out, err := gen.Generate([]generate.Request{{Prompt: []int{1, 2}, MaxNew: 4}}, generate.Sampling{Temperature: 1, TopP: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(out[0].LogProbs) != 2 || out[0].LogProbs[0] != -0.5 || out[0].LogProbs[1] != -1.5 {
				t.Errorf("log-probs %v, want [-0.5 -1.5]", out[0].LogProbs)
			}
			if err := gen.UnloadLoRA(ctx, "run-step-0"); err != nil {
				t.Fatal(err)
			}
			withLogprobs = false
			if _, err := gen.Generate([]generate.Request{{Prompt: []int{1, 2}, MaxNew: 4}}, generate.Sampling{Temperature: 1, TopP: 1}); err == nil || !strings.Contains(err.Error(), "no log-prob") {
				t.Errorf("a completion without log-probs: error %v", err)
			}
			withLogprobs, withIDs = true, false // a text-only answer: no ids to train on
			if _, err := gen.Generate([]generate.Request{{Prompt: []int{1, 2}, MaxNew: 4}}, generate.Sampling{Temperature: 1, TopP: 1}); err == nil || !strings.Contains(err.Error(), "no token ids") {
				t.Errorf("a completion without token ids: error %v", err)
			}
			want := []string{root + "load_lora_adapter", "/v1/completions", root + "unload_lora_adapter", "/v1/completions", "/v1/completions"}
			if strings.Join(paths, " ") != strings.Join(want, " ") {
				t.Fatalf("paths %v, want %v", paths, want)
			}
			if bodies[0]["lora_name"] != "run-step-1" || bodies[0]["lora_path"] != "/runs/x/served/step-1" || bodies[2]["lora_name"] != "run-step-0" {
				t.Errorf("load/unload bodies %v, %v", bodies[0], bodies[2])
			}
			// vLLM takes the adapter as the model; SGLang only as lora_path (the model the base's).
			wantModel, wantLoRA := any("run-step-1"), any(nil)
			if api == rollout.RemoteSGLang {
				wantModel, wantLoRA = "base", "run-step-1"
			}
			if bodies[1]["model"] != wantModel || bodies[1]["lora_path"] != wantLoRA || bodies[1]["logprobs"] != float64(1) {
				t.Errorf("completion body names model %v lora_path %v and asks logprobs %v; want %v, %v and 1",
					bodies[1]["model"], bodies[1]["lora_path"], bodies[1]["logprobs"], wantModel, wantLoRA)
			}
		})
	}
	cfg := rollout.DefaultRemoteConfig()
	cfg.Generator, cfg.Endpoint, cfg.RemoteAPI, cfg.RemoteModel = rollout.GeneratorOpenAI, "http://127.0.0.1:1/v1", rollout.RemoteChat, "gpt"
	gen, err := New(cfg, guardtest.Tokenizer(t), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := gen.LoadLoRA(context.Background(), "a", "/b"); err == nil || !strings.Contains(err.Error(), "cannot load LoRA adapters") {
		t.Errorf("a chat API: error %v", err)
	}
}

// TestLoadLoRAAlreadyLoaded: a load whose answer timed out is retried, and the server's 400
// "already loaded" for that name is success; the same answer naming another adapter (even one
// whose name extends this one's) or any other 400 is an error.
func TestLoadLoRAAlreadyLoaded(t *testing.T) {
	const vllm = `{"object": "error", "message": "The lora adapter '%s' has already been loaded.", "type": "InvalidUserInput", "code": 400}`
	for _, tc := range []struct {
		name     string
		hangs    bool   // the first load hangs past the client's timeout (loaded, answer lost)
		answer   string // then the server's 400 answer
		ok       bool
		requests int
	}{
		{"retry after a lost answer", true, fmt.Sprintf(vllm, "run-step-1"), true, 2},
		{"loaded before", false, fmt.Sprintf(vllm, "run-step-1"), true, 1},
		{"sglang", false, `{"object": "error", "message": "LoRA adapter run-step-1 is already loaded."}`, true, 1},
		{"another adapter", false, fmt.Sprintf(vllm, "run-step-10"), false, 1},
		{"another error", false, `{"object": "error", "message": "No adapter found for run-step-1"}`, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			requests := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body) // a read body lets the server see the client go away
				mu.Lock()
				requests++
				n := requests
				mu.Unlock()
				if tc.hangs && n == 1 {
					<-r.Context().Done() // until the client's timeout closes the connection
					return
				}
				w.WriteHeader(http.StatusBadRequest)
				w.Write([]byte(tc.answer))
			}))
			defer srv.Close()
			cfg := rollout.DefaultRemoteConfig()
			cfg.Generator, cfg.Endpoint, cfg.RemoteAPI, cfg.RemoteModel = rollout.GeneratorOpenAI, srv.URL+"/v1", rollout.RemoteVLLM, "base"
			cfg.RemoteTimeoutS = 0.2
			gen, err := New(cfg, guardtest.Tokenizer(t), nil, "")
			if err != nil {
				t.Fatal(err)
			}
			gen.Backoff = time.Millisecond
			err = gen.LoadLoRA(context.Background(), "run-step-1", "/runs/x/served/step-1")
			if (err == nil) != tc.ok {
				t.Errorf("error %v, want success %v", err, tc.ok)
			}
			mu.Lock()
			defer mu.Unlock()
			if requests != tc.requests {
				t.Errorf("%d requests, want %d", requests, tc.requests)
			}
		})
	}
}
