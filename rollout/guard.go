package rollout

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/model/chat"
	"github.com/mageguard/mageguard/model/tokenizer"
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
	Prompt  []int    // the full prompt, chat template and generation prompt included
	MaxNew  int      // max new tokens
	Stops   []int    // token ids that end the completion (kept as its last token)
	Grammar *Grammar // structured decoding (nil: free, stopping at a stop token)
	// Watch lists token ids whose log-probs the generator reports at every
	// step (Completion.Watch): the judge's decision alternatives, for its score.
	Watch []int
	// Chat is the same call before the chat template, for generators that
	// can only send messages (chat APIs); Prompt is its rendering.
	Chat *ChatPrompt
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
	// (its `usage`), which Call.Tokens reports instead of ours.
	Usage *Usage
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

// Episode is one trajectory cut to the turns [Start, End) that the guard runs on.
type Episode struct {
	Traj       *dataset.Trajectory
	Start, End int
}

// Call is one guard call (memory or judge) of one chain at one turn.
type Call struct {
	Prompt       []int       // prompt token ids (system prompt included)
	PrefixTokens int         // tokens of the system prompt (tools included): the shareable prefix
	Completion   []int       // generated token ids
	LogProbs     []float32   // per completion token, from the sampler
	Forced       []bool      // per completion token: forced by the grammar
	Text         string      // the completion decoded (special tokens kept)
	Parsed       bool        // the completion is a valid call of the role's tool
	Violation    string      // why it is not (when !Parsed)
	Watch        [][]float32 // per completion token, the watched ids' log-probs (Completion.Watch)
	Usage        *Usage      // the server's token counts, when it gave them

	chat ChatPrompt // the call before the chat template (Request.Chat)
}

// Tokens is the number of tokens the call reads and writes: the server's
// count when it gave one, else our prompt and completion.
func (c *Call) Tokens() int {
	if c.Usage != nil {
		return c.Usage.PromptTokens + c.Usage.CompletionTokens
	}
	return len(c.Prompt) + len(c.Completion)
}

// Turn is the outcome of one turn of one chain.
type Turn struct {
	Index     int    // the turn's index in the trajectory (from 0)
	Label     int    // the action's label
	Memory    *Call  // nil for the judge-only variant
	MemoryOut string // m_t: the memory after this turn (the previous one on a violation)
	Judge     Call
	Decision  string // the effective decision: "approve", or "reject" (also the fallback); with votes, their majority
	Rationale string // the (first) judge's rationale (FallbackRationale on a violation)
	Votes     []Call // with K > 1 votes: all K judge calls (Judge is the first)
	// Score is p(reject) from the judge's decision token (score.go); with
	// votes, the mean of the votes' scores. ScoreExact is false when it is
	// the decision itself (no log-probs, or a format violation: 1).
	Score      float64
	ScoreExact bool
}

// VoteDecisions returns the effective decision of each vote (a vote that
// failed to parse counts as "reject").
func (t *Turn) VoteDecisions() []string {
	var ds []string
	for i := range t.Votes {
		d := DecisionReject
		if t.Votes[i].Parsed {
			if j, err := ParseJudgement(t.Votes[i].Text); err == nil {
				d = j.Decision
			}
		}
		ds = append(ds, d)
	}
	return ds
}

// MemoryChars is |m_t| as DESIGN.md counts it for the length penalty and
// the metrics: Unicode code points (not bytes, not tokens).
func (t *Turn) MemoryChars() int { return utf8.RuneCountInString(t.MemoryOut) }

// GuardTokens is the tokens every call of the turn reads and writes: the
// memory call and the judge call (all K of them with votes).
func (t *Turn) GuardTokens() int {
	n := t.Judge.Tokens()
	for i := 1; i < len(t.Votes); i++ {
		n += t.Votes[i].Tokens()
	}
	if t.Memory != nil {
		n += t.Memory.Tokens()
	}
	return n
}

// VoteTokens is the share of GuardTokens spent on votes beyond the first.
func (t *Turn) VoteTokens() int {
	n := 0
	for i := 1; i < len(t.Votes); i++ {
		n += t.Votes[i].Tokens()
	}
	return n
}

// PrefixTokens is the system prompts' share of GuardTokens.
func (t *Turn) PrefixTokens() int {
	n := t.Judge.PrefixTokens * max(len(t.Votes), 1)
	if t.Memory != nil {
		n += t.Memory.PrefixTokens
	}
	return n
}

// Chain is one chain's run over an episode.
type Chain struct {
	Episode *Episode
	Index   int    // chain number within the group (0..G-1)
	Turns   []Turn // one per turn of the episode, in order
}

// Stats counts what the loop did, for logs.
type Stats struct {
	Calls          int // guard calls made
	PromptTokens   int // prompt tokens of all calls
	NewTokens      int // generated tokens of all calls
	ElidedTokens   int // observation tokens left out by elision
	ElidedObs      int // observations elided
	MemoryFailures int // memory calls that failed to parse
	JudgeFailures  int // judge calls that failed to parse

	ElidedArguments    int // action names and argument strings elided (rollout.max_argument_tokens)
	ElidedActions      int // actions whose arguments were elided as a whole (rollout.max_action_tokens)
	ElidedActionTokens int // action tokens left out by both
	ElidedUsers        int // user messages elided, the request included (rollout.max_user_tokens)
	ElidedUserTokens   int // user-message tokens left out
}

// Add adds the counts of o to s.
func (s *Stats) Add(o Stats) {
	s.Calls += o.Calls
	s.PromptTokens += o.PromptTokens
	s.NewTokens += o.NewTokens
	s.ElidedTokens += o.ElidedTokens
	s.ElidedObs += o.ElidedObs
	s.MemoryFailures += o.MemoryFailures
	s.JudgeFailures += o.JudgeFailures
	s.ElidedArguments += o.ElidedArguments
	s.ElidedActions += o.ElidedActions
	s.ElidedActionTokens += o.ElidedActionTokens
	s.ElidedUsers += o.ElidedUsers
	s.ElidedUserTokens += o.ElidedUserTokens
}

func (s Stats) String() string {
	out := fmt.Sprintf("%d calls, %d prompt + %d new tokens, %d observations elided (%d tokens)",
		s.Calls, s.PromptTokens, s.NewTokens, s.ElidedObs, s.ElidedTokens)
	if s.ElidedArguments+s.ElidedActions > 0 {
		out += fmt.Sprintf(", %d argument values and %d whole actions elided (%d tokens)", s.ElidedArguments, s.ElidedActions, s.ElidedActionTokens)
	}
	if s.ElidedUsers > 0 {
		out += fmt.Sprintf(", %d user messages elided (%d tokens)", s.ElidedUsers, s.ElidedUserTokens)
	}
	return out + fmt.Sprintf(", format violations: memory %d, judge %d", s.MemoryFailures, s.JudgeFailures)
}

// Guard runs the guard loop with one model: the prompts, the tokenizer and
// chat template, a generator, and (with structured decoding) a grammar per
// role.
type Guard struct {
	cfg     Config
	tok     *tokenizer.Tokenizer
	prompts *Prompts
	gen     Generator
	grammar [2]*Grammar // per Role, nil without structured decoding
	prefix  [3]int      // system-prompt tokens: memory, judge, judge-only
	stops   []int       // tokens that end a completion
	watch   *decisionWatch
}

// Grammar templates of the two tool calls, as Qwen3's chat template writes
// them (chat.ToolCallText).
const (
	memoryCallTemplate = "<tool_call>\n{\"name\": \"update_memory\", \"arguments\": {\"content\": \"{string}\"}}\n</tool_call>"
)

// judgeCallTemplate is the grammar of an assess_risk call whose arguments
// come in the order args gives: the decision an enum, the rationale free
// text.
func judgeCallTemplate(args []string) string {
	value := map[string]string{"decision": "{choice:approve|reject}", "rationale": "{string}"}
	parts := make([]string, len(args))
	for i, k := range args {
		parts[i] = "\"" + k + "\": \"" + value[k] + "\""
	}
	return "<tool_call>\n{\"name\": \"assess_risk\", \"arguments\": {" + strings.Join(parts, ", ") + "}}\n</tool_call>"
}

// NewGuard builds a guard from its configuration, tokenizer and generator.
func NewGuard(cfg Config, tok *tokenizer.Tokenizer, gen Generator) (*Guard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rollout.%w", err)
	}
	prompts, err := NewPrompts(cfg)
	if err != nil {
		return nil, err
	}
	g := &Guard{cfg: cfg, tok: tok, prompts: prompts, gen: gen, watch: newDecisionWatch(tok)}
	for _, name := range []string{"<|im_end|>", "<|endoftext|>"} {
		id, ok := tok.TokenID(name)
		if !ok {
			return nil, fmt.Errorf("rollout: the tokenizer has no %s token (not a Qwen3 tokenizer?)", name)
		}
		g.stops = append(g.stops, id)
	}
	for i, sys := range []struct {
		text string
		tool chat.Tool
	}{{prompts.MemorySystem, prompts.MemoryTool}, {prompts.JudgeSystem, prompts.JudgeTool}, {prompts.JudgeOnlySystem, prompts.JudgeTool}} {
		g.prefix[i] = len(chat.Encode(tok, []chat.Message{chat.NewMessage(chat.RoleSystem, sys.text)}, g.declared(sys.tool), chat.Options{}))
	}
	if cfg.Structured {
		for role, tmpl := range []string{memoryCallTemplate, judgeCallTemplate(prompts.JudgeArgs)} {
			gr, err := NewGrammar(tok, tmpl, g.stops[0])
			if err != nil {
				return nil, err
			}
			max := []int{cfg.MaxMemoryTokens, cfg.MaxJudgeTokens}[role]
			if gr.MinBudget() > max {
				return nil, fmt.Errorf("rollout: structured %s calls need at least %d new tokens, max is %d", Role(role), gr.MinBudget(), max)
			}
			g.grammar[role] = gr
		}
	}
	return g, nil
}

// PrefixTokens returns the tokens of each role's system prompt (its tool
// declared): the prefix every call of the role starts with, for the
// memory manager, the judge and the judge-only variant's judge.
func (g *Guard) PrefixTokens() (memory, judge, judgeOnly int) {
	return g.prefix[0], g.prefix[1], g.prefix[2]
}

// Stops returns the token ids that end a completion.
func (g *Guard) Stops() []int { return g.stops }

// Prompts returns the guard's prompts.
func (g *Guard) Prompts() *Prompts { return g.prompts }

// newCall encodes a prompt with the chat template: the system prompt with
// the role's tool declared, the user message, and the generation prompt
// with thinking off.
func (g *Guard) newCall(p Prompt, role Role) *Call {
	tool, prefix := g.prompts.MemoryTool, g.prefix[0]
	if role == JudgeRole {
		tool, prefix = g.prompts.JudgeTool, g.prefix[1]
		if p.System == g.prompts.JudgeOnlySystem {
			prefix = g.prefix[2]
		}
	}
	msgs := []chat.Message{
		chat.NewMessage(chat.RoleSystem, p.System),
		{Role: chat.RoleUser, Content: p.User},
	}
	ids := chat.Encode(g.tok, msgs, g.declared(tool), chat.Options{AddGenerationPrompt: true})
	return &Call{Prompt: ids, PrefixTokens: prefix, chat: ChatPrompt{System: p.System, User: p.UserText(), Tool: tool}}
}

// declared returns the tools a system prompt declares: the role's tool,
// or none with rollout.declare_tools off.
func (g *Guard) declared(tool chat.Tool) []chat.Tool {
	if !g.cfg.DeclareTools {
		return nil
	}
	return []chat.Tool{tool}
}

func (g *Guard) request(c *Call, role Role) Request {
	if role == JudgeRole {
		return Request{Prompt: c.Prompt, MaxNew: g.cfg.MaxJudgeTokens, Stops: g.stops, Grammar: g.grammar[role], Watch: g.watch.ids, Chat: &c.chat}
	}
	return Request{Prompt: c.Prompt, MaxNew: g.cfg.MaxMemoryTokens, Stops: g.stops, Grammar: g.grammar[role], Chat: &c.chat}
}

// episodeView holds an episode's untrusted texts after elision (elide.go),
// computed once and shared by its chains.
type episodeView struct {
	ep         *Episode
	userPrompt string           // the user's request
	obs        []string         // per turn of the trajectory (only [Start-1, End) are filled)
	actions    []dataset.Action // per turn, like obs
	users      []*string        // per turn, like obs: the user message before the action, if any
}

func (g *Guard) view(e *Episode, stats *Stats) *episodeView {
	tr := e.Traj
	v := &episodeView{ep: e, obs: make([]string, len(tr.Turns)), actions: make([]dataset.Action, len(tr.Turns)),
		users: make([]*string, len(tr.Turns))}
	el := elider{g: g, stats: stats}
	v.userPrompt = el.user(tr.UserPrompt)
	for t := max(e.Start-1, 0); t < e.End; t++ {
		tu := &tr.Turns[t]
		v.obs[t] = el.observation(tu.Observation)
		v.actions[t] = el.action(tu.Action)
		if tu.User != nil {
			u := el.user(*tu.User)
			v.users[t] = &u
		}
	}
	return v
}

// events returns what the memory sees at turn t of the window (from 0), in
// order: at the window's first turn the user's request and the action just
// before the window, if any; later the previous action with its
// observation; then the user message that arrived before this turn's
// action, if any.
func (v *episodeView) events(t int) Events {
	abs := v.ep.Start + t
	var ev Events
	if t == 0 {
		ev = append(ev, Event{User: &v.userPrompt})
	}
	if abs > 0 {
		ev = append(ev, Event{Action: &v.actions[abs-1], Observation: v.obs[abs-1]})
	}
	if u := v.users[abs]; u != nil {
		ev = append(ev, Event{User: u})
	}
	return ev
}

// judgeOnly returns the judge-only prompt at turn t of the window: the
// user's request, the action just before the window (as the memory variant
// sees it), the window's earlier steps with their user messages, then the
// pending action.
func (v *episodeView) judgeOnly(p *Prompts, t int) Prompt {
	var hist []HistoryStep
	for k := max(v.ep.Start-1, 0); k < v.ep.Start+t; k++ {
		h := HistoryStep{Action: v.actions[k], Observation: v.obs[k]}
		if k >= v.ep.Start {
			h.UserRequest = v.users[k]
		}
		hist = append(hist, h)
	}
	abs := v.ep.Start + t
	return p.JudgeOnly(v.userPrompt, hist, v.users[abs], v.actions[abs])
}
