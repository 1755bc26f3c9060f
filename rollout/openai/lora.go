package openai

// LoRA adapters loaded into the server at run time: training with a
// remote generator writes its adapter after every optimizer step, loads it
// under a new name and names it in the next rollouts' requests.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/mageguard/mageguard/rollout"
)

// SetModel makes later requests name model (instead of
// rollout.remote_model): the adapter LoadLoRA loaded. vLLM takes it as the
// request's model; SGLang as its lora_path, the model staying
// rollout.remote_model.
func (g *Generator) SetModel(model string) {
	g.mu.Lock()
	g.model = model
	g.mu.Unlock()
}

// modelName is the model requests name.
func (g *Generator) modelName() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.model
}

// loraRequest is the body of vLLM's and SGLang's load and unload calls.
type loraRequest struct {
	LoRAName string `json:"lora_name"`
	LoRAPath string `json:"lora_path,omitempty"`
}

// LoadLoRA asks the server to load the PEFT adapter directory path (a path
// the server can read) under name: vLLM's POST {endpoint}/load_lora_adapter
// (a server started with --enable-lora and
// VLLM_ALLOW_RUNTIME_LORA_UPDATING=True), SGLang's POST /load_lora_adapter
// at the server's root. A load the server answers with "already loaded"
// for this name succeeds: it is the retry of a load that completed but
// whose answer was lost (a timeout), or an adapter of that name loaded
// before.
func (g *Generator) LoadLoRA(ctx context.Context, name, path string) error {
	u, err := g.loraURL("load_lora_adapter")
	if err != nil {
		return err
	}
	err = g.postURL(ctx, u, loraRequest{LoRAName: name, LoRAPath: path}, nil)
	var se *statusError
	if errors.As(err, &se) && alreadyLoaded(se, name) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load LoRA adapter %s from %s: %w", name, path, err)
	}
	return nil
}

// alreadyLoaded reports whether e is the server refusing to load name
// again: vLLM's 400 "The lora adapter 'NAME' has already been loaded.",
// SGLang's 400 naming the adapter as already loaded.
func alreadyLoaded(e *statusError, name string) bool {
	if e.code != http.StatusBadRequest {
		return false
	}
	msg := strings.ToLower(e.msg)
	if !strings.Contains(msg, "already been loaded") && !strings.Contains(msg, "already loaded") && !strings.Contains(msg, "already exists") {
		return false
	}
	// name as a whole word: loading step-1 is not answered by step-10's message.
	word := func(r rune) bool {
		return r == '-' || r == '_' || r == '.' || r == '/' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
	}
	return slices.Contains(strings.FieldsFunc(e.msg, func(r rune) bool { return !word(r) }), name)
}

// UnloadLoRA asks the server to drop the adapter name (vLLM's
// /unload_lora_adapter beside load_lora_adapter; SGLang's at its root).
func (g *Generator) UnloadLoRA(ctx context.Context, name string) error {
	u, err := g.loraURL("unload_lora_adapter")
	if err != nil {
		return err
	}
	if err := g.postURL(ctx, u, loraRequest{LoRAName: name}, nil); err != nil {
		return fmt.Errorf("unload LoRA adapter %s: %w", name, err)
	}
	return nil
}

// loraURL is the URL of a LoRA call: under the endpoint for vLLM, at the
// server's root for SGLang; a chat API has none.
func (g *Generator) loraURL(call string) (string, error) {
	switch g.cfg.RemoteAPI {
	case rollout.RemoteVLLM:
		return strings.TrimRight(g.cfg.Endpoint, "/") + "/" + call, nil
	case rollout.RemoteSGLang:
		u, err := url.Parse(g.cfg.Endpoint)
		if err != nil {
			return "", err
		}
		return u.Scheme + "://" + u.Host + "/" + call, nil
	}
	return "", fmt.Errorf("rollout.remote_api %s cannot load LoRA adapters (vllm and sglang can)", g.cfg.RemoteAPI)
}
