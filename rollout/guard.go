package rollout

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/model/chat"
	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/grammar"
	"github.com/mageguard/mageguard/rollout/prompt"
)

// Episode is one trajectory cut to the turns [Start, End) that the guard runs on.
type Episode struct {
	Traj       *dataset.Trajectory
	Start, End int
}

// Call is one guard call (memory or judge) of one chain at one turn.
type Call struct {
	Prompt       []int           // prompt token ids (system prompt included)
	PrefixTokens int             // tokens of the system prompt (tools included): the shareable prefix
	Completion   []int           // generated token ids
	LogProbs     []float32       // per completion token, from the sampler
	Forced       []bool          // per completion token: forced by the grammar
	Text         string          // the completion decoded (special tokens kept)
	Parsed       bool            // the completion is a valid call of the role's tool
	Violation    string          // why it is not (when !Parsed)
	Watch        [][]float32     // per completion token, the watched ids' log-probs (Completion.Watch)
	Usage        *generate.Usage // the server's token counts, when it gave them
	// Time is the wall time of the generator's call this call ran in (a
	// batch's: shared by its calls), Prefill its share spent prefilling
	// prompts (0 when the generator cannot tell: a server).
	Time, Prefill time.Duration

	chat generate.ChatPrompt // the call before the chat template (Request.Chat)
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
		d := prompt.DecisionReject
		if t.Votes[i].Parsed {
			if j, err := prompt.ParseJudgement(t.Votes[i].Text); err == nil {
				d = j.Decision
			}
		}
		ds = append(ds, d)
	}
	return ds
}

// MemoryChars is |m_t| as the length penalty (docs/design.md#rewards) and
// the metrics (docs/design.md#metrics) count it: Unicode code points (not
// bytes, not tokens).
func (t *Turn) MemoryChars() int { return utf8.RuneCountInString(t.MemoryOut) }

// GuardTokens is the tokens every call of the turn reads and writes: the
// memory call and the judge call (all K of them with votes).
func (t *Turn) GuardTokens() int {
	n := t.Judge.Tokens() + t.VoteTokens()
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

// Timing is where a turn's guard time went, from its calls' generator
// times (Call.Time, Call.Prefill; a batch's, shared by its turns): the
// prompts' prefill (memory and judge), then the memory's and the judge's
// generation after their prefill. With a generator that cannot tell its
// prefill (a server), Prefill is 0 and each role's time is its whole call.
type Timing struct {
	Prefill, Memory, Judge time.Duration
}

// Timing returns the turn's Timing.
func (t *Turn) Timing() Timing {
	tm := Timing{Prefill: t.Judge.Prefill, Judge: t.Judge.Time - t.Judge.Prefill}
	if t.Memory != nil {
		tm.Prefill += t.Memory.Prefill
		tm.Memory = t.Memory.Time - t.Memory.Prefill
	}
	return tm
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
	prompts *prompt.Prompts
	gen     generate.Generator
	grammar [2]*grammar.Grammar // per Role, nil without structured decoding
	prefix  [3]int              // system-prompt tokens: memory, judge, judge-only
	stops   []int               // tokens that end a completion
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
func NewGuard(cfg Config, tok *tokenizer.Tokenizer, gen generate.Generator) (*Guard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("rollout.%w", err)
	}
	prompts, err := prompt.NewPrompts(cfg.PromptOptions())
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
			gr, err := grammar.NewGrammar(tok, tmpl, g.stops[0])
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

// Grammar returns the grammar of role's calls: nil without structured
// decoding.
func (g *Guard) Grammar(role Role) *grammar.Grammar { return g.grammar[role] }

// Stops returns the token ids that end a completion.
func (g *Guard) Stops() []int { return g.stops }

// Prompts returns the guard's prompts.
func (g *Guard) Prompts() *prompt.Prompts { return g.prompts }

// newCall encodes a prompt with the chat template: the system prompt with
// the role's tool declared, the user message, and the generation prompt
// with thinking off.
func (g *Guard) newCall(p prompt.Prompt, role Role) *Call {
	tool, prefix := g.prompts.MemoryTool, g.prefix[0]
	if role == JudgeRole {
		tool, prefix = g.prompts.JudgeTool, g.prefix[1]
		if p.System == g.prompts.JudgeOnlySystem {
			prefix = g.prefix[2]
		}
	}
	ids := prompt.Encode(g.tok, p, g.declared(tool))
	return &Call{Prompt: ids, PrefixTokens: prefix, chat: generate.ChatPrompt{System: p.System, User: p.UserText(), Tool: tool}}
}

// declared returns the tools a system prompt declares: the role's tool,
// or none with rollout.declare_tools off.
func (g *Guard) declared(tool chat.Tool) []chat.Tool {
	if !g.cfg.DeclareTools {
		return nil
	}
	return []chat.Tool{tool}
}

// Request returns the generation request of call c in role: its prompt,
// the role's token budget, the stop tokens, the role's grammar with
// structured decoding, and for the judge the decision's watched tokens.
func (g *Guard) Request(c *Call, role Role) generate.Request {
	if role == JudgeRole {
		return generate.Request{Prompt: c.Prompt, MaxNew: g.cfg.MaxJudgeTokens, Stops: g.stops, Grammar: g.grammar[role], Watch: g.watch.ids, Chat: &c.chat, Prefix: c.PrefixTokens}
	}
	return generate.Request{Prompt: c.Prompt, MaxNew: g.cfg.MaxMemoryTokens, Stops: g.stops, Grammar: g.grammar[role], Chat: &c.chat, Prefix: c.PrefixTokens}
}

// episodeView holds an episode's untrusted texts after elision
// (prompt.ElideText, prompt.ElideAction), computed once and shared by its
// chains.
type episodeView struct {
	ep         *Episode
	userPrompt string           // the user's request
	obs        []string         // per turn of the trajectory (only [Start-1, End) are filled)
	actions    []dataset.Action // per turn, like obs
	users      []*string        // per turn, like obs: the user message before the action, if any
	tools      *string          // the trajectory's tools (prompt.ToolsText, elided as an observation); nil: none
}

func (g *Guard) view(e *Episode, stats *Stats) *episodeView {
	tr := e.Traj
	v := &episodeView{ep: e, obs: make([]string, len(tr.Turns)), actions: make([]dataset.Action, len(tr.Turns)),
		users: make([]*string, len(tr.Turns))}
	el := elider{g: g, stats: stats}
	v.userPrompt = el.user(tr.UserPrompt)
	if len(tr.Tools) > 0 {
		text := el.observation(prompt.ToolsText(tr.Tools))
		v.tools = &text
	}
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
// order: at the window's first turn the user's request (and the agent's
// tools, when the trajectory has them) and the action just
// before the window, if any; later the previous action with its
// observation; then the user message that arrived before this turn's
// action, if any.
func (v *episodeView) events(t int) prompt.Events {
	abs := v.ep.Start + t
	var ev prompt.Events
	if t == 0 {
		ev = append(ev, prompt.Event{User: &v.userPrompt})
		if v.tools != nil {
			ev = append(ev, prompt.Event{Tools: v.tools})
		}
	}
	if abs > 0 {
		ev = append(ev, prompt.Event{Action: &v.actions[abs-1], Observation: v.obs[abs-1]})
	}
	if u := v.users[abs]; u != nil {
		ev = append(ev, prompt.Event{User: u})
	}
	return ev
}

// judgeOnly returns the judge-only prompt at turn t of the window: the
// user's request, the action just before the window (as the memory variant
// sees it), the window's earlier steps with their user messages, then the
// pending action.
func (v *episodeView) judgeOnly(p *prompt.Prompts, t int) prompt.Prompt {
	var hist []prompt.HistoryStep
	for k := max(v.ep.Start-1, 0); k < v.ep.Start+t; k++ {
		h := prompt.HistoryStep{Action: v.actions[k], Observation: v.obs[k]}
		if k >= v.ep.Start {
			h.UserRequest = v.users[k]
		}
		hist = append(hist, h)
	}
	abs := v.ep.Start + t
	return p.JudgeOnly(v.userPrompt, hist, v.users[abs], v.actions[abs])
}
