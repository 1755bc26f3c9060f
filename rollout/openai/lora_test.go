package openai

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

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
