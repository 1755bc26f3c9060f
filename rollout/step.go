package rollout

import (
	"errors"
	"fmt"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/rollout/generate"
	"github.com/mageguard/mageguard/rollout/prompt"
)

// StepInput is one session's next step of the online guard loop
// (docs/design.md#the-guard-loop, Algorithm 1): the state the session keeps between
// steps (the user's request, m_{t−1}, the previous action) and what the
// agent reports now (the previous action's observation, new user messages,
// the pending action a_t). Its texts are raw: Step elides them as Run does.
type StepInput struct {
	UserPrompt   string          // the user's request q_0, shown to the memory at the first step
	Tools        []dataset.Tool  // the agent's tools, shown to the memory at the first step after the request (none: nothing shown)
	First        bool            // the session's first step (t = 1)
	Memory       string          // m_{t−1} ("" at the first step)
	Previous     *dataset.Action // a_{t−1}, nil at the first step
	Observation  string          // o_{t−1}, the previous action's observation
	UserMessages []string        // user messages that arrived since the last step, in order
	Action       dataset.Action  // the pending action a_t
	// MaxPromptTokens > 0 bounds the step's memory and judge prompts (after
	// elision): a step with a longer one fails alone with a
	// *PromptTooLongError.
	MaxPromptTokens int

	prepared *prepared // PrepareStep's work, which Step then does not redo
}

// prepared is what Step does for a step before generating: its untrusted
// texts elided and its memory call rendered.
type prepared struct {
	memory *Call          // the memory call, its prompt rendered
	action dataset.Action // the pending action as the judge sees it
	stats  Stats          // what elision left out
}

// PromptTooLongError is a step refused because one of its prompts has more
// tokens than its StepInput.MaxPromptTokens.
type PromptTooLongError struct {
	Role        Role
	Tokens, Max int
}

func (e *PromptTooLongError) Error() string {
	return fmt.Sprintf("the %s prompt has %d tokens, more than the %d allowed", e.Role, e.Tokens, e.Max)
}

// StepErrors is Step's error when some of its steps failed alone (a
// *PromptTooLongError): Errs[i] is step i's error, and the turns of the
// steps whose error is nil are valid.
type StepErrors struct{ Errs []error }

func (e *StepErrors) Error() string {
	n, first := 0, -1
	for i, err := range e.Errs {
		if err != nil {
			n++
			if first < 0 {
				first = i
			}
		}
	}
	return fmt.Sprintf("%d of %d steps failed; step %d: %v", n, len(e.Errs), first, e.Errs[first])
}

// PrepareStep does for one step the work Step does before it generates:
// the step's untrusted texts elided (by the rules Run follows, elide.go),
// its memory call's prompt rendered and checked against
// in.MaxPromptTokens, and the judge's prompt with the current memory
// checked too. Step runs the returned input without redoing that work
// (change none of its fields afterwards). A server calls it as each step
// arrives, so that a step too long is refused alone, before it joins a
// generation batch, and the batch spends no time on the step's text.
func (g *Guard) PrepareStep(in StepInput) (StepInput, error) {
	p, err := g.prepare(&in)
	if err != nil {
		return in, err
	}
	in.prepared = p
	return in, nil
}

// PromptTokens is the length of a prepared step's memory prompt (0 for an
// input PrepareStep did not return): what the step costs, roughly, beside
// other steps.
func (in *StepInput) PromptTokens() int {
	if in.prepared == nil {
		return 0
	}
	return len(in.prepared.memory.Prompt)
}

// prepare elides a step's texts, renders its memory call and checks its
// prompts' lengths.
func (g *Guard) prepare(in *StepInput) (*prepared, error) {
	p := &prepared{}
	el := elider{g: g, stats: &p.stats}
	var ev prompt.Events // what the memory sees, in the order Run's episodes show it
	if in.First {
		u := el.user(in.UserPrompt)
		ev = append(ev, prompt.Event{User: &u})
		if len(in.Tools) > 0 {
			tools := el.observation(prompt.ToolsText(in.Tools))
			ev = append(ev, prompt.Event{Tools: &tools})
		}
	}
	if in.Previous != nil {
		a := el.action(*in.Previous)
		ev = append(ev, prompt.Event{Action: &a, Observation: el.observation(in.Observation)})
	}
	for _, m := range in.UserMessages {
		u := el.user(m)
		ev = append(ev, prompt.Event{User: &u})
	}
	p.action = el.action(in.Action)
	p.memory = g.newCall(g.prompts.Memory(in.Memory, ev), MemoryRole)
	if max := in.MaxPromptTokens; max > 0 {
		if n := len(p.memory.Prompt); n > max {
			return nil, &PromptTooLongError{Role: MemoryRole, Tokens: n, Max: max}
		}
		// The judge reads the new memory; the current one tells a pending
		// action too long for any memory before the step is run.
		if n := len(g.newCall(g.prompts.Judge(in.Memory, p.action), JudgeRole).Prompt); n > max {
			return nil, &PromptTooLongError{Role: JudgeRole, Tokens: n, Max: max}
		}
	}
	return p, nil
}

// Step runs one step of the MAGE guard loop for each input, batched across
// inputs: all memory calls together (m_t = M(m_{t−1}, s_{t−1})), then all
// judge calls together (d_t = J(a_t | m_t)), with the prompts, elision,
// parsing and fallbacks of Run, so a session driven step by step through a
// trajectory gets the turns Run gives that trajectory (greedily decoded,
// batch for batch). The returned turns carry the calls, m_t (MemoryOut),
// the decision, rationale and score; Index and Label are left zero.
// Sampling seeds are derived from s.Seed. A step whose prompt is longer
// than its MaxPromptTokens fails alone: the others run, and the error is a
// *StepErrors. The Stats count what the call did, a call that failed
// included (its steps' elisions, the calls it made); a caller that runs
// the same steps again counts them again, so it keeps one call's Stats
// per step.
func (g *Guard) Step(inputs []StepInput, s generate.Sampling) ([]Turn, Stats, error) {
	var stats Stats
	if g.cfg.Variant != "mage" {
		return nil, stats, fmt.Errorf("rollout: Step runs the mage variant, not %q", g.cfg.Variant)
	}
	for i := range inputs {
		if inputs[i].Action.Name == "" {
			return nil, stats, fmt.Errorf("rollout: step %d: the pending action has no name", i)
		}
		if inputs[i].First != (inputs[i].Previous == nil) {
			return nil, stats, errors.New("rollout: a step has a previous action exactly when it is not the first")
		}
	}
	turns := make([]Turn, len(inputs))
	errs := make([]error, len(inputs))
	preps := make([]*prepared, len(inputs))
	var live []int // the steps not failed
	for k := range inputs {
		p, err := inputs[k].prepared, error(nil)
		if p == nil {
			p, err = g.prepare(&inputs[k])
		}
		if err != nil {
			errs[k] = err
			continue
		}
		stats.Add(p.stats)
		preps[k] = p
		live = append(live, k)
	}

	reqs := make([]generate.Request, len(live))
	calls := make([]*Call, len(live))
	for i, k := range live {
		c := *preps[k].memory // a copy: a prepared input may run again
		calls[i] = &c
		reqs[i] = g.Request(calls[i], MemoryRole)
	}
	if err := g.generate(reqs, calls, s, 0, &stats); err != nil {
		return nil, stats, fmt.Errorf("memory calls of %d session(s): %w", len(live), err)
	}
	for i, k := range live {
		turns[k].Memory = calls[i]
		turns[k].MemoryOut = g.memoryOutcome(calls[i], inputs[k].Memory, &stats)
	}

	judged := live[:0:0]
	reqs, calls = reqs[:0], calls[:0]
	for _, k := range live {
		c := g.newCall(g.prompts.Judge(turns[k].MemoryOut, preps[k].action), JudgeRole)
		if max := inputs[k].MaxPromptTokens; max > 0 && len(c.Prompt) > max {
			errs[k] = &PromptTooLongError{Role: JudgeRole, Tokens: len(c.Prompt), Max: max}
			continue
		}
		judged = append(judged, k)
		calls = append(calls, c)
		reqs = append(reqs, g.Request(c, JudgeRole))
	}
	if err := g.generate(reqs, calls, s, 1, &stats); err != nil {
		return nil, stats, fmt.Errorf("judge calls of %d session(s): %w", len(judged), err)
	}
	for i, k := range judged {
		j := g.judgeOutcome(calls[i], &stats)
		turns[k].Judge = *calls[i]
		turns[k].Decision, turns[k].Rationale = j.Decision, j.Rationale
		turns[k].Score, turns[k].ScoreExact = j.Score, j.ScoreExact
	}
	if len(judged) < len(inputs) {
		return turns, stats, &StepErrors{Errs: errs}
	}
	return turns, stats, nil
}

// memoryOutcome parses a memory call (marking it parsed or recording its
// violation) and returns m_t: the new memory, or prev on a violation.
func (g *Guard) memoryOutcome(c *Call, prev string, stats *Stats) string {
	call, err := prompt.ParseMemory(c.Text)
	if err != nil {
		c.Violation = err.Error()
		stats.MemoryFailures++
		return prev
	}
	c.Parsed = true
	return call.Content
}

// Judgement is a judge call's outcome: the decision and rationale (the
// fallback reject and FallbackRationale on a violation) and the decision's
// score (score.go).
type Judgement struct {
	Decision, Rationale string
	Score               float64
	ScoreExact          bool
}

// judgeOutcome parses a judge call (marking it parsed or recording its
// violation) and returns its outcome.
func (g *Guard) judgeOutcome(c *Call, stats *Stats) Judgement {
	j, err := prompt.ParseJudgement(c.Text)
	if err != nil {
		c.Violation = err.Error()
		stats.JudgeFailures++
		return Judgement{Decision: prompt.DecisionReject, Rationale: FallbackRationale, Score: 1}
	}
	c.Parsed = true
	score, exact := g.watch.score(g.tok, c, j, g.grammar[JudgeRole] != nil)
	return Judgement{Decision: j.Decision, Rationale: j.Rationale, Score: score, ScoreExact: exact}
}
