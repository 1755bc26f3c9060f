// Package generate is the contract between the guard loop (package
// rollout) and what runs its calls: a Generator turns a batch of Requests
// (prompt token ids, a token budget, stop tokens, an optional grammar) into
// Completions, drawn as Sampling says. The loop builds the requests and
// reads the completions; the generators (rollout/localgen: a Qwen3 model
// here; rollout/openai: an OpenAI-compatible server) import this package
// and nothing of the loop, and tests use scripted ones
// (internal/guardtest).
package generate

import (
	"time"

	"github.com/mageguard/mageguard/model/chat"
	"github.com/mageguard/mageguard/rollout/grammar"
)

// Sampling says how completions are drawn.
type Sampling struct {
	Greedy      bool    // argmax decoding (eval)
	Temperature float64 // > 0; log-probs are taken from logits / Temperature
	TopK        int     // 0 = off
	TopP        float64 // 1 = off
	Seed        uint64  // makes sampling reproducible
}

// Request is one completion to generate.
type Request struct {
	Prompt  []int            // the full prompt, chat template and generation prompt included
	MaxNew  int              // max new tokens
	Stops   []int            // token ids that end the completion (kept as its last token)
	Grammar *grammar.Grammar // structured decoding (nil: free, stopping at a stop token)
	// Watch lists token ids whose log-probs the generator reports at every
	// step (Completion.Watch): the judge's decision alternatives, for its score.
	Watch []int
	// Chat is the same call before the chat template, for generators that
	// can only send messages (chat APIs); Prompt is its rendering.
	Chat *ChatPrompt
	// Prefix is how many of Prompt's first tokens are the role's static
	// part (its system prompt with the tool declared), the same at every
	// call of the role: a generator may keep their keys and values across
	// calls and prefill only what follows (0: none said).
	Prefix int
}

// ChatPrompt is a guard call as chat messages: the role's system prompt,
// the user message (untrusted parts included as plain text) and the tool
// the call must use.
type ChatPrompt struct {
	System, User string
	Tool         chat.Tool
}

// Completion is a generated completion.
type Completion struct {
	Tokens   []int     // generated tokens, stop token included when produced
	LogProbs []float32 // log π(token) under logits / temperature, unconstrained
	Forced   []bool    // the token was forced by the grammar (no choice: not in the loss)
	// Watch, for a Request with Watch: per token, the log-probs of the
	// watched ids at the step that produced it (−Inf: not known, e.g. outside
	// a server's top-N); nil when the generator cannot tell.
	Watch [][]float32
	// Text, when not empty, is the completion as text, for generators that
	// return no token ids (chat APIs); else the text is Tokens decoded.
	Text string
	// Usage, when not nil, is the server's own count of the call's tokens
	// (its `usage`), which the loop's token counts report instead of its own.
	Usage *Usage
	// Prefill is the time the generator spent prefilling the prompts of
	// the Generate call this completion came from (every completion of the
	// call carries the same); 0 when it cannot tell (a server).
	Prefill time.Duration
}

// Usage is a server's count of a call's tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// Generator generates completions for a batch of requests. The model's
// generator batches them; tests use scripted ones.
type Generator interface {
	Generate(reqs []Request, s Sampling) ([]Completion, error)
}
