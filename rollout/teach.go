package rollout

// Teacher forcing: the prompts the guard loop renders at a turn of an
// episode given the memories, and the completion a model should generate
// for a given tool call. A supervised warm start trains on exactly these
// (prompt, completion) pairs; the guard loop renders its prompts with the
// same functions (EpisodeCalls), so the two cannot diverge.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mageguard/mageguard/rollout/prompt"
)

// EpisodeCalls renders the calls of one episode's turns. Build it with
// Guard.EpisodeCalls.
type EpisodeCalls struct {
	g *Guard
	v *episodeView
}

// EpisodeCalls returns the renderer of e's calls. Observations longer than
// rollout.max_observation_tokens are elided as in the guard loop; stats
// (may be nil) counts the elisions.
func (g *Guard) EpisodeCalls(e *Episode, stats *Stats) *EpisodeCalls {
	if stats == nil {
		stats = &Stats{}
	}
	return &EpisodeCalls{g: g, v: g.view(e, stats)}
}

// Memory returns the memory call of turn t of the window (from 0), whose
// prompt shows the previous memory prev (m_{t−1}; "" at t = 0, shown as
// empty) and the events since it: m_t = M(m_{t−1}, s_{t−1}). It returns
// nil for the judge-only variant, which has no memory call.
func (c *EpisodeCalls) Memory(t int, prev string) *Call {
	if c.g.cfg.Variant != "mage" {
		return nil
	}
	return c.g.memoryCall(c.v, t, prev)
}

// memoryCall renders the memory call of turn t of v's window (Run and
// EpisodeCalls).
func (g *Guard) memoryCall(v *episodeView, t int, prev string) *Call {
	return g.newCall(g.prompts.Memory(prev, v.events(t)), MemoryRole)
}

// Judge returns the judge call of turn t of the window: the memory m_t and
// the pending action (variant mage), or the raw trajectory so far and the
// pending action (judge-only, which ignores memory).
func (c *EpisodeCalls) Judge(t int, memory string) *Call { return c.g.judgeCall(c.v, t, memory) }

// judgeCall renders the judge call of turn t of v's window (Run and
// EpisodeCalls).
func (g *Guard) judgeCall(v *episodeView, t int, memory string) *Call {
	var p prompt.Prompt
	if g.cfg.Variant == "mage" {
		p = g.prompts.Judge(memory, v.actions[v.ep.Start+t])
	} else {
		p = v.judgeOnly(g.prompts, t)
	}
	return g.newCall(p, JudgeRole)
}

// Completion returns the tokens a model should generate for call in role's
// turn: the call as Qwen3's chat template writes it (ToolCall.Text) and the
// stop token <|im_end|>. The template's text is encoded as trusted text
// (<tool_call> is its added token); the string values (content, rationale)
// as untrusted text, each apart from the text around it, as a model
// sampling a JSON string token by token writes them.
//
// With structured decoding the completion is one the role's grammar
// accepts, and forced says which of its tokens the grammar forces (they
// carry no choice and, as in GRPO, no loss); without it forced is nil. It
// fails when the call is not the role's tool, its decision is neither
// approve nor reject, a value cannot be written by the grammar (a '"', '\'
// or control character needs an escape, which structured decoding cannot
// emit), or the completion exceeds the role's token budget
// (rollout.max_memory_tokens / max_judge_tokens).
func (g *Guard) Completion(role Role, call prompt.ToolCall) (tokens []int, forced []bool, err error) {
	want, budget := prompt.MemoryToolName, g.cfg.MaxMemoryTokens
	if role == JudgeRole {
		want, budget = prompt.JudgeToolName, g.cfg.MaxJudgeTokens
	}
	if call.Name != want {
		return nil, nil, fmt.Errorf("%s call: tool %q, want %s", role, call.Name, want)
	}
	if role == JudgeRole && call.Decision != prompt.DecisionApprove && call.Decision != prompt.DecisionReject {
		return nil, nil, fmt.Errorf("judge call: decision %q is neither %q nor %q", call.Decision, prompt.DecisionApprove, prompt.DecisionReject)
	}
	// Split ToolCall.Text at its string values: trusted template text
	// between them, the values (JSON-escaped, quotes excluded) untrusted.
	text := call.TextIn(g.prompts.JudgeArgs)
	keys := []string{"content"}
	if role == JudgeRole {
		keys = g.prompts.JudgeArgs
	}
	rest := text
	for i := range keys {
		// The value follows its key (an earlier value cannot hold the key's
		// text: its quotes are escaped) and ends at the first unescaped '"'.
		key := `"` + keys[i] + `": "`
		k := strings.Index(rest, key)
		if k < 0 {
			return nil, nil, fmt.Errorf("%s call: no %s in %q", role, keys[i], text) // cannot happen: Text writes every argument so
		}
		k += len(key)
		n := 0
		for ; k+n < len(rest) && rest[k+n] != '"'; n++ {
			if rest[k+n] == '\\' {
				n++
			}
		}
		esc := rest[k : k+n]
		tokens = append(tokens, g.tok.Encode(rest[:k])...)
		if role == JudgeRole && keys[i] == "decision" {
			tokens = append(tokens, g.tok.Encode(esc)...) // the decision: an enum value, as the grammar encodes it
		} else {
			tokens = append(tokens, g.tok.EncodeUntrusted(esc)...)
		}
		rest = rest[k+n:]
	}
	tokens = append(tokens, g.tok.Encode(rest)...)
	tokens = append(tokens, g.stops[0])
	if len(tokens) > budget {
		return nil, nil, fmt.Errorf("%s call: %d tokens, over the budget of %d (rollout.max_%s_tokens)", role, len(tokens), budget, role)
	}
	parse := prompt.ParseMemory
	if role == JudgeRole {
		parse = prompt.ParseJudgement
	}
	if parsed, err := parse(g.tok.Decode(tokens, false)); err != nil {
		return nil, nil, fmt.Errorf("%s call: the completion does not parse: %w", role, err) // cannot happen: Text is a valid call
	} else if parsed != call {
		return nil, nil, fmt.Errorf("%s call: the completion parses as %+v, want %+v", role, parsed, call)
	}
	gr := g.grammar[role]
	if gr == nil {
		return tokens, nil, nil
	}
	// Replay the completion through the grammar: it must accept every token.
	d := gr.NewDecoder(budget)
	forced = make([]bool, len(tokens))
	for k, id := range tokens {
		c := d.Next()
		ok := true
		switch {
		case c.Force >= 0:
			ok, forced[k] = id == c.Force, true
		case c.Allowed != nil:
			ok = slices.Contains(c.Allowed, id)
		default:
			ok = !slices.Contains(c.Banned, id)
		}
		if ok {
			ok = d.Advance(id) == nil
		}
		if !ok {
			return nil, nil, fmt.Errorf("%s call: structured decoding cannot write %q (token %d of %d, %q: a value may not hold '\"', '\\' or control characters)",
				role, text, k, len(tokens), g.tok.Decode([]int{id}, false))
		}
	}
	if !d.Done() {
		return nil, nil, fmt.Errorf("%s call: the grammar expects more than %q", role, text) // cannot happen: the stop token ends every call
	}
	return tokens, forced, nil
}
