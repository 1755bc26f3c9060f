// Package openai runs the guard's calls on an OpenAI-compatible server
// (rollout.generator: openai), for `eval` and `serve`, and for `train`'s
// rollouts of a LoRA adapter it loads into the server after every step
// (lora.go, SampledLogProbs).
//
// Against vLLM and SGLang (remote_api vllm | sglang) every call is our own
// rendering sent as token ids to /completions, so the chat template, the
// untrusted-text guarantee (no added-token id from untrusted text: the ids
// are ours) and the prompts stay exactly those of the local generator. The
// completion comes back as token ids (return_token_ids), decoded and parsed
// by our strict parser. Structured calls use the server's guided decoding
// with a regular expression equivalent to the call's grammar (vLLM
// `structured_outputs.regex`, SGLang `regex`). Log-probs (`logprobs`: the
// top-N per position; vLLM names tokens "token_id:N" with
// return_tokens_as_token_ids, SGLang by their text) give the decision score.
//
// Against an API that takes only chat messages (remote_api chat) the call
// is sent as a system and a user message with the role's tool forced by
// tool_choice; the returned tool call is written back in Qwen3's format
// and parsed by the same parser. docs/serving.md lists what that loses.
//
// Token counts come from each response's `usage`. 429, 5xx and transport
// errors are retried (remote_retries, waiting Retry-After when the server
// sends it, else an exponential backoff); every HTTP request has a timeout
// (remote_timeout_s).
package openai

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mageguard/mageguard/internal/seed"
	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/grammar"
)

// Generator generates completions on an OpenAI-compatible server.
// Build it with New.
type Generator struct {
	cfg    rollout.RemoteConfig
	tok    *tokenizer.Tokenizer
	stops  []int
	key    string
	client *http.Client

	// Backoff is the wait before the first retry when the server sends no
	// Retry-After (doubled at each retry); MaxWait caps any wait.
	Backoff, MaxWait time.Duration

	// SampledLogProbs makes every /completions request ask for log-probs
	// and every completion carry its token ids and the sampled tokens'
	// log-probs (an error when the server leaves either out): training's
	// rollout log-probs. Set it before
	// the first Generate.
	SampledLogProbs bool

	mu    sync.Mutex
	model string // the model requests name (remote_model, or the adapter SetModel named)
}

// New returns a generator for cfg (cfg.Generator openai),
// rendering with tok, stopping at stops (Guard.Stops), sending key (may be
// empty) as a bearer token.
func New(cfg rollout.RemoteConfig, tok *tokenizer.Tokenizer, stops []int, key string) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rollout.%w", err)
	}
	if cfg.Generator != rollout.GeneratorOpenAI {
		return nil, fmt.Errorf("rollout.generator is %q, not %s", cfg.Generator, rollout.GeneratorOpenAI)
	}
	return &Generator{
		cfg: cfg, tok: tok, stops: stops, key: key, model: cfg.RemoteModel,
		client:  &http.Client{Timeout: time.Duration(cfg.RemoteTimeoutS * float64(time.Second))},
		Backoff: 500 * time.Millisecond, MaxWait: 30 * time.Second,
	}, nil
}

// Generate implements generate.Generator: the requests run concurrently (at most
// remote_concurrency at once); the first error stops the others.
func (g *Generator) Generate(reqs []generate.Request, s generate.Sampling) ([]generate.Completion, error) {
	out := make([]generate.Completion, len(reqs))
	errs := make([]error, len(reqs))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sem := make(chan struct{}, g.cfg.RemoteConcurrency)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			seed := int64(seed.Mix(s.Seed, uint64(i)) >> 1) // servers take a signed 64-bit seed
			if g.cfg.RemoteAPI == rollout.RemoteChat {
				out[i], errs[i] = g.chat(ctx, &reqs[i], s, seed)
			} else {
				out[i], errs[i] = g.complete(ctx, &reqs[i], s, seed)
			}
			if errs[i] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	// Report the first error that is not another request's cancellation.
	var first error
	for i, err := range errs {
		if err == nil {
			continue
		}
		err = fmt.Errorf("request %d of %d: %w", i, len(reqs), err)
		if first == nil || errors.Is(first, context.Canceled) {
			first = err
		}
	}
	if first != nil {
		return nil, first
	}
	return out, nil
}

// sampling returns the temperature, top-p and top-k a request sends.
func sampling(s generate.Sampling) (temp, topP float64, topK int) {
	if s.Greedy {
		return 0, 1, 0
	}
	return s.Temperature, s.TopP, s.TopK
}

// completionsRequest is the body of POST /completions (vLLM and SGLang).
type completionsRequest struct {
	Model                  string             `json:"model,omitempty"`
	Prompt                 []int              `json:"prompt"`
	MaxTokens              int                `json:"max_tokens"`
	Temperature            float64            `json:"temperature"`
	TopP                   float64            `json:"top_p"`
	TopK                   int                `json:"top_k,omitempty"`
	Seed                   int64              `json:"seed"`
	StopTokenIDs           []int              `json:"stop_token_ids,omitempty"`
	SkipSpecialTokens      bool               `json:"skip_special_tokens"`
	Logprobs               int                `json:"logprobs,omitempty"`
	ReturnTokenIDs         bool               `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool               `json:"return_tokens_as_token_ids,omitempty"` // vLLM
	StructuredOutputs      *structuredOutputs `json:"structured_outputs,omitempty"`         // vLLM (>= 0.10.2)
	Regex                  string             `json:"regex,omitempty"`                      // SGLang
	LoRAPath               string             `json:"lora_path,omitempty"`                  // SGLang: the adapter's name
}

type structuredOutputs struct {
	Regex string `json:"regex"`
}

// completionsResponse is what this generator reads of a /completions answer.
type completionsResponse struct {
	Choices []struct {
		Text         string `json:"text"`
		TokenIDs     []int  `json:"token_ids"`
		FinishReason string `json:"finish_reason"`
		Logprobs     *struct {
			Tokens        []string             `json:"tokens"`
			TokenLogprobs []*float64           `json:"token_logprobs"`
			TopLogprobs   []map[string]float64 `json:"top_logprobs"`
		} `json:"logprobs"`
	} `json:"choices"`
	Usage *generate.Usage `json:"usage"`
}

// complete runs one request on /completions.
func (g *Generator) complete(ctx context.Context, r *generate.Request, s generate.Sampling, seed int64) (generate.Completion, error) {
	temp, topP, topK := sampling(s)
	body := completionsRequest{
		Model: g.modelName(), Prompt: r.Prompt, MaxTokens: r.MaxNew,
		Temperature: temp, TopP: topP, TopK: topK, Seed: seed,
		StopTokenIDs: g.stops, ReturnTokenIDs: true,
	}
	if g.cfg.RemoteAPI == rollout.RemoteSGLang && body.Model != g.cfg.RemoteModel {
		// SGLang's OpenAI layer takes the adapter from lora_path, not from model.
		body.Model, body.LoRAPath = g.cfg.RemoteModel, body.Model
	}
	if len(r.Watch) > 0 && g.cfg.RemoteLogprobs > 0 {
		body.Logprobs = g.cfg.RemoteLogprobs
	}
	if g.SampledLogProbs {
		body.Logprobs = max(body.Logprobs, 1) // the sampled token's log-prob comes with the top-1
	}
	if g.cfg.RemoteAPI == rollout.RemoteVLLM {
		body.ReturnTokensAsTokenIDs = true
	}
	if r.Grammar != nil {
		re := grammar.Regex(r.Grammar)
		if g.cfg.RemoteAPI == rollout.RemoteVLLM {
			body.StructuredOutputs = &structuredOutputs{Regex: re}
		} else {
			body.Regex = re
		}
	}
	var resp completionsResponse
	if err := g.post(ctx, "/completions", body, &resp); err != nil {
		return generate.Completion{}, err
	}
	if len(resp.Choices) != 1 {
		return generate.Completion{}, fmt.Errorf("the server returned %d choices, want 1", len(resp.Choices))
	}
	ch := resp.Choices[0]
	var c generate.Completion
	c.Usage = resp.Usage
	ids := ch.TokenIDs
	if ids == nil && ch.Logprobs != nil && len(ch.Logprobs.Tokens) > 0 {
		// Older vLLM: no token_ids, but logprobs' tokens are "token_id:N".
		for _, t := range ch.Logprobs.Tokens {
			id, ok := tokenIDKey(t)
			if !ok {
				ids = nil
				break
			}
			ids = append(ids, id)
		}
	}
	if ids == nil {
		if g.SampledLogProbs {
			return generate.Completion{}, errors.New("the server returned no token ids (training needs the server's token ids and the sampled tokens' log-probs: return_token_ids, logprobs)")
		}
		// No ids: parse the text (the score then falls back to the decision).
		c.Text = ch.Text
		return c, nil
	}
	for _, id := range ids {
		if id < 0 || id >= g.tok.VocabSize() {
			return generate.Completion{}, fmt.Errorf("the server returned token id %d outside the tokenizer's vocabulary [0, %d)", id, g.tok.VocabSize())
		}
	}
	c.Tokens = ids
	c.LogProbs = make([]float32, len(ids))
	c.Forced = make([]bool, len(ids))
	if r.Grammar != nil {
		// The tokens the call's grammar forces (no choice, not trained on), when the
		// server wrote the call with the grammar's own tokens; else none is marked.
		if f, err := r.Grammar.Forced(ids, r.MaxNew); err == nil {
			c.Forced = f
		}
	}
	if g.SampledLogProbs && (ch.Logprobs == nil || len(ch.Logprobs.TokenLogprobs) < len(ids)) {
		return generate.Completion{}, fmt.Errorf("the server returned no log-prob for some of the %d tokens (training needs the sampled tokens' log-probs)", len(ids))
	}
	if lp := ch.Logprobs; lp != nil {
		for i := range ids {
			if i < len(lp.TokenLogprobs) && lp.TokenLogprobs[i] != nil {
				c.LogProbs[i] = float32(*lp.TokenLogprobs[i])
			} else if g.SampledLogProbs {
				return generate.Completion{}, fmt.Errorf("the server returned no log-prob for token %d (training needs the sampled tokens' log-probs)", i)
			}
		}
		if len(r.Watch) > 0 {
			c.Watch = g.watched(r.Watch, ids, lp.TopLogprobs, lp.TokenLogprobs)
		}
	}
	return c, nil
}

// watched builds Completion.Watch from a server's top log-probs: per token,
// the log-prob of each watched id when the server listed it (or sampled
// it), else −Inf.
func (g *Generator) watched(watch, ids []int, top []map[string]float64, sampled []*float64) [][]float32 {
	slot := map[int]int{}
	for j, id := range watch {
		slot[id] = j
	}
	byText := g.watchedTexts(watch)
	out := make([][]float32, len(ids))
	for i := range ids {
		row := make([]float32, len(watch))
		for j := range row {
			row[j] = float32(math.Inf(-1))
		}
		if i < len(top) {
			for key, lp := range top[i] {
				id, ok := tokenIDKey(key)
				if !ok {
					id, ok = byText[key]
				}
				if j, w := slot[id]; ok && w {
					row[j] = float32(lp)
				}
			}
		}
		if j, w := slot[ids[i]]; w && i < len(sampled) && sampled[i] != nil {
			row[j] = float32(*sampled[i])
		}
		out[i] = row
	}
	return out
}

// watchedTexts maps the text of each watched id to the id (SGLang names
// top log-probs by text; the watched tokens are ASCII, so their texts are
// distinct).
func (g *Generator) watchedTexts(watch []int) map[string]int {
	byText := make(map[string]int, len(watch))
	for _, id := range watch {
		text := g.tok.Decode([]int{id}, false)
		if _, ok := byText[text]; !ok {
			byText[text] = id
		}
	}
	return byText
}

// tokenIDKey reads vLLM's "token_id:N" token names.
func tokenIDKey(s string) (int, bool) {
	rest, ok := strings.CutPrefix(s, "token_id:")
	if !ok {
		return 0, false
	}
	id, err := strconv.Atoi(rest)
	return id, err == nil && id >= 0
}
