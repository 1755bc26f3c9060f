package rollout

import (
	"fmt"
	"net/url"
)

// Generators (rollout.generator).
const (
	GeneratorLocal  = "local"  // the GoMLX model of the model section (package rollout/localgen)
	GeneratorOpenAI = "openai" // an OpenAI-compatible server (package rollout/openai)
)

// Remote APIs (rollout.remote_api).
const (
	// RemoteVLLM and RemoteSGLang send our own rendering as token ids to
	// /completions, with the server's guided decoding for structured calls.
	RemoteVLLM   = "vllm"
	RemoteSGLang = "sglang"
	// RemoteChat sends messages and the role's tool to /chat/completions
	// (APIs that accept nothing else); see docs/serving.md for what it loses.
	RemoteChat = "chat"
)

// RemoteConfig is the part of the rollout section that says which
// generator runs the guard's calls and, for a remote one, how to reach it.
// Its keys sit directly under rollout (rollout.generator, rollout.endpoint, …).
type RemoteConfig struct {
	Generator         string  `yaml:"generator"`          // local (the model section's checkpoint) | openai (a server at endpoint; eval, serve, and train's rollouts with model.lora)
	Endpoint          string  `yaml:"endpoint"`           // the server's base URL, e.g. http://127.0.0.1:8000/v1 (…/completions is appended)
	RemoteAPI         string  `yaml:"remote_api"`         // vllm | sglang (token ids to /completions) | chat (messages to /chat/completions)
	RemoteModel       string  `yaml:"remote_model"`       // the model name the server serves ("" = the server's default; required for chat)
	APIKeyEnv         string  `yaml:"api_key_env"`        // environment variable holding the API key, sent as a bearer token ("" or unset: none)
	RemoteTimeoutS    float64 `yaml:"remote_timeout_s"`   // timeout of one HTTP request, seconds
	RemoteRetries     int     `yaml:"remote_retries"`     // retries of a request after 429, 5xx or a transport error
	RemoteConcurrency int     `yaml:"remote_concurrency"` // requests in flight at once (the server batches them)
	RemoteLogprobs    int     `yaml:"remote_logprobs"`    // top log-probs asked per position, for the decision score (0 = none; vLLM caps it at its max_logprobs, 20 by default)
}

// DefaultRemoteConfig is the local generator, with the remote keys at
// values that suit a vLLM server on this machine.
func DefaultRemoteConfig() RemoteConfig {
	return RemoteConfig{
		Generator:         GeneratorLocal,
		Endpoint:          "",
		RemoteAPI:         RemoteVLLM,
		RemoteModel:       "",
		APIKeyEnv:         "OPENAI_API_KEY",
		RemoteTimeoutS:    120,
		RemoteRetries:     3,
		RemoteConcurrency: 32,
		RemoteLogprobs:    20,
	}
}

// Validate checks the values; errors start with the key's name.
func (c *RemoteConfig) Validate() error {
	switch {
	case c.Generator != GeneratorLocal && c.Generator != GeneratorOpenAI:
		return fmt.Errorf("generator must be %s or %s, got %q", GeneratorLocal, GeneratorOpenAI, c.Generator)
	case c.RemoteAPI != RemoteVLLM && c.RemoteAPI != RemoteSGLang && c.RemoteAPI != RemoteChat:
		return fmt.Errorf("remote_api must be %s, %s or %s, got %q", RemoteVLLM, RemoteSGLang, RemoteChat, c.RemoteAPI)
	case !(c.RemoteTimeoutS > 0 && c.RemoteTimeoutS <= 24*60*60):
		return fmt.Errorf("remote_timeout_s must be in (0, 86400] seconds, got %g", c.RemoteTimeoutS)
	case c.RemoteRetries < 0 || c.RemoteRetries > 20:
		return fmt.Errorf("remote_retries must be in [0, 20], got %d", c.RemoteRetries)
	case c.RemoteConcurrency < 1:
		return fmt.Errorf("remote_concurrency must be >= 1, got %d", c.RemoteConcurrency)
	case c.RemoteLogprobs < 0 || c.RemoteLogprobs > 20:
		return fmt.Errorf("remote_logprobs must be in [0, 20], got %d", c.RemoteLogprobs)
	}
	if c.Generator == GeneratorOpenAI {
		u, err := url.Parse(c.Endpoint)
		if c.Endpoint == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("endpoint must be an http(s) URL with generator %s, got %q", GeneratorOpenAI, c.Endpoint)
		}
		if c.RemoteAPI == RemoteChat && c.RemoteModel == "" {
			return fmt.Errorf("remote_model must name the model with remote_api %s", RemoteChat)
		}
	}
	return nil
}
