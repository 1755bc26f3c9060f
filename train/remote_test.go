package train

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mageguard/mageguard/grpo"
	"github.com/mageguard/mageguard/model"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/grammar"
	"github.com/mageguard/mageguard/rollout/localgen"
	"github.com/mageguard/mageguard/train/teacher"
)

// loraStub is a stand-in for a vLLM server with runtime LoRA updating: POST
// /v1/load_lora_adapter loads a PEFT adapter directory onto its base (through
// mageguard's own loader), /v1/unload_lora_adapter drops one, and
// /v1/completions generates with the adapter the request names (through
// mageguard's own generator, the structured call's grammar found from the
// regular expression the request carries) and answers with token ids and
// the sampled tokens' log-probs. stale makes it generate with the first
// adapter it loaded, whatever the request names: a server that missed the
// updates. sglang makes it an SGLang-like server: the LoRA calls at the
// root, the regular expression in `regex`, and the adapter taken from the
// request's lora_path only (model ignored; without lora_path the first
// adapter, the base's weights, as a stale server).
type loraStub struct {
	t        *testing.T
	settings model.Settings
	grammars map[string]*grammar.Grammar // by the regular expression a request carries
	stale    bool
	sglang   bool

	mu       sync.Mutex
	adapters map[string]*localgen.Generator
	first    string
	loads    []string // names loaded, in order
	unloads  []string
	requests int
	named    map[string]int // completions requested, by the name they carried
}

func newLoraStub(t *testing.T, o Options, stale, sglang bool) *loraStub {
	tok, _, err := o.Model.LoadTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	g, err := rollout.NewGuard(o.Rollout, tok, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &loraStub{t: t, settings: o.Model, stale: stale, sglang: sglang, grammars: map[string]*grammar.Grammar{},
		adapters: map[string]*localgen.Generator{}, named: map[string]int{}}
	s.settings.LoRA = model.LoRAConfig{}
	for _, role := range []rollout.Role{rollout.MemoryRole, rollout.JudgeRole} {
		if gr := g.Grammar(role); gr != nil {
			s.grammars[grammar.Regex(gr)] = gr
		}
	}
	return s
}

func (s *loraStub) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fail := func(code int, format string, args ...any) {
		http.Error(w, fmt.Sprintf(format, args...), code)
	}
	path := req.URL.Path
	if s.sglang && strings.HasSuffix(path, "lora_adapter") {
		if strings.HasPrefix(path, "/v1/") {
			fail(404, "no route %s (SGLang's LoRA calls are at the root)", path)
			return
		}
		path = "/v1" + path
	}
	switch path {
	case "/v1/load_lora_adapter", "/v1/unload_lora_adapter":
		var body struct {
			Name string `json:"lora_name"`
			Path string `json:"lora_path"`
		}
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			fail(400, "%v", err)
			return
		}
		if strings.HasPrefix(path, "/v1/unload") {
			if !s.stale || body.Name != s.first { // a stale server keeps its first adapter
				delete(s.adapters, body.Name)
			}
			s.unloads = append(s.unloads, body.Name)
			return
		}
		st := s.settings
		st.Path = body.Path
		m, tok, err := st.Open()
		if err != nil {
			fail(400, "%v", err)
			return
		}
		_ = tok
		s.adapters[body.Name] = &localgen.Generator{Model: m}
		if s.first == "" {
			s.first = body.Name
		}
		s.loads = append(s.loads, body.Name)
		fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", body.Name) // vLLM answers plain text
	case "/v1/completions":
		var body struct {
			Model             string  `json:"model"`
			Prompt            []int   `json:"prompt"`
			MaxTokens         int     `json:"max_tokens"`
			Temperature       float64 `json:"temperature"`
			TopP              float64 `json:"top_p"`
			TopK              int     `json:"top_k"`
			Seed              int64   `json:"seed"`
			Stops             []int   `json:"stop_token_ids"`
			Logprobs          int     `json:"logprobs"`
			StructuredOutputs *struct {
				Regex string `json:"regex"`
			} `json:"structured_outputs"`
			Regex    string `json:"regex"`     // SGLang
			LoRAPath string `json:"lora_path"` // SGLang
		}
		if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
			fail(400, "%v", err)
			return
		}
		s.requests++
		name := body.Model
		if s.sglang {
			name = body.LoRAPath
		}
		s.named[name]++
		if s.stale || name == "" {
			name = s.first
		}
		gen, ok := s.adapters[name]
		if !ok {
			fail(404, "The model `%s` does not exist.", body.Model)
			return
		}
		if body.Logprobs < 1 {
			fail(400, "the stub answers only requests that ask for log-probs")
			return
		}
		r := generate.Request{Prompt: body.Prompt, MaxNew: body.MaxTokens, Stops: body.Stops}
		re := body.Regex
		if body.StructuredOutputs != nil && !s.sglang {
			re = body.StructuredOutputs.Regex
		}
		if re != "" {
			if r.Grammar, ok = s.grammars[re]; !ok {
				fail(400, "unknown regex")
				return
			}
		}
		out, err := gen.Generate([]generate.Request{r}, generate.Sampling{Temperature: body.Temperature, TopK: body.TopK, TopP: body.TopP, Seed: uint64(body.Seed)})
		if err != nil {
			fail(500, "%v", err)
			return
		}
		c := out[0]
		lps := make([]float64, len(c.Tokens))
		for i, lp := range c.LogProbs {
			lps[i] = float64(lp)
		}
		json.NewEncoder(w).Encode(map[string]any{
			"choices": []map[string]any{{"text": "", "token_ids": c.Tokens, "finish_reason": "stop",
				"logprobs": map[string]any{"token_logprobs": lps}}},
			"usage": map[string]int{"prompt_tokens": len(body.Prompt), "completion_tokens": len(c.Tokens)},
		})
	default:
		fail(404, "no route %s", req.URL.Path)
	}
}

// TestRemoteRolloutsServeTheTrainedAdapter trains a LoRA adapter with its rollouts generated by a
// vLLM-like stub server (and an SGLang-like one, which takes the adapter from lora_path): before the first step and after every step the adapter is written,
// loaded under a new name and requested by that name (the previous one unloaded), and the
// server's token ids and log-probs feed the update and the rollout correction. With the current
// adapter served, the server's log-probs are π_old's (KL(π_rollout ‖ π_old) ≈ 0 every step);
// a stub that keeps serving the first adapter shows it at once (the estimate jumps once the
// adapter has moved).
func TestRemoteRolloutsServeTheTrainedAdapter(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	kl := map[string][]float64{}
	for _, tc := range []struct {
		name          string
		stale, sglang bool
	}{{"current", false, false}, {"stale", true, false}, {"sglang", false, true}} {
		o := loraOptions(t, t.TempDir(), "float32")
		o.Train.Steps = 3
		o.GRPO.RolloutCorrection = grpo.CorrectionTIS
		stub := newLoraStub(t, o, tc.stale, tc.sglang)
		srv := httptest.NewServer(stub)
		o.Rollout.Generator, o.Rollout.Endpoint, o.Rollout.RemoteConcurrency = rollout.GeneratorOpenAI, srv.URL+"/v1", 4
		if tc.sglang {
			o.Rollout.RemoteAPI = rollout.RemoteSGLang
		}
		o.Rollout.APIKeyEnv = ""
		_, err := Run(context.Background(), o)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		ms := readJSONL[Metrics](t, filepath.Join(o.Out, "metrics.jsonl"))
		if len(ms) != o.Train.Steps || len(stub.loads) != o.Train.Steps+1 || len(stub.unloads) != o.Train.Steps {
			t.Fatalf("%s: %d steps, %d adapters loaded, %d unloaded; want %d, %d, %d", tc.name, len(ms), len(stub.loads), len(stub.unloads), o.Train.Steps, o.Train.Steps+1, o.Train.Steps)
		}
		for i, m := range ms {
			// Step s's rollouts request the adapter loaded after step s−1 (before step 1: the start).
			if m.ServedAdapter != stub.loads[i] || !strings.HasSuffix(m.ServedAdapter, fmt.Sprintf("-step-%d", i)) {
				t.Errorf("%s: step %d requested %q; loaded %v", tc.name, m.Step, m.ServedAdapter, stub.loads)
			}
			if stub.named[m.ServedAdapter] == 0 {
				t.Errorf("%s: no completion named %s", tc.name, m.ServedAdapter)
			}
			if i > 0 && stub.unloads[i-1] != stub.loads[i-1] {
				t.Errorf("%s: unloaded %v, loaded %v", tc.name, stub.unloads, stub.loads)
			}
			kl[tc.name] = append(kl[tc.name], *m.RolloutKL)
			t.Logf("%s step %d: rollout_kl %.3g weight mean %.4f max %.4f, %s", tc.name, m.Step, *m.RolloutKL, *m.RolloutWeightMean, *m.RolloutWeightMax, m.ServedAdapter)
		}
		if total := stub.requests; total == 0 || stub.named[stub.loads[len(stub.loads)-1]] != 0 {
			t.Errorf("%s: %d requests; the adapter loaded after the last step was requested %d times, want 0", tc.name, total, stub.named[stub.loads[len(stub.loads)-1]])
		}
	}
	for i, v := range append(kl["current"], kl["sglang"]...) {
		if v > 1e-6 {
			t.Errorf("current adapter served (vLLM, then SGLang): step %d KL(π_rollout ‖ π_old) %v, want ≈ 0", i+1, v)
		}
	}
	if last := kl["stale"][len(kl["stale"])-1]; !(last > 1e-4) {
		t.Errorf("stale adapter served: last step KL(π_rollout ‖ π_old) %v, want it far above the current adapter's (≤ 1e-6)", last)
	}
}

// TestRemoteGeneratorRefusals: rollouts on a server need a LoRA adapter (full weights are
// not loaded into a server every step) and a token-level API, a rollout correction needs
// untruncated sampling (top_p 1, top_k 0: the server's log-probs include the truncation), and sft refuses a server (only
// GRPO loads its adapter after every step).
func TestRemoteGeneratorRefusals(t *testing.T) {
	remote := func(o *Options) {
		o.Rollout.Generator, o.Rollout.Endpoint = rollout.GeneratorOpenAI, "http://127.0.0.1:1/v1"
	}
	o := microOptions(t, filepath.Join(t.TempDir(), "out"))
	remote(&o)
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "model.lora.rank 0") {
		t.Errorf("full fine-tuning on a server's rollouts: error %v", err)
	}
	o = loraOptions(t, t.TempDir(), "float32")
	remote(&o)
	o.Rollout.RemoteAPI, o.Rollout.RemoteModel = rollout.RemoteChat, "gpt"
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "remote_api chat") {
		t.Errorf("a chat API: error %v", err)
	}
	for _, edit := range []func(o *Options){func(o *Options) { o.Rollout.TopP = 0.9 }, func(o *Options) { o.Rollout.TopK = 20 }} {
		o = loraOptions(t, t.TempDir(), "float32")
		remote(&o)
		o.GRPO.RolloutCorrection = grpo.CorrectionTIS
		edit(&o)
		if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "grpo.rollout_correction tis with rollout.generator openai needs rollout.top_p 1 and rollout.top_k 0") {
			t.Errorf("a correction with truncated sampling on a server: error %v", err)
		}
	}
	o = loraOptions(t, t.TempDir(), "float32")
	remote(&o)
	if _, err := SFT(context.Background(), o, DefaultSFTConfig(), teacher.Synth{BudgetChars: 100}); err == nil || !strings.Contains(err.Error(), "sft needs the local model") {
		t.Errorf("sft on a server: error %v", err)
	}
}
