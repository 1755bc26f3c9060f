package rollout

import (
	"errors"
	"fmt"

	"github.com/mageguard/mageguard/dataset"
)

// StepInput is one session's next step of the online guard loop (DESIGN.md
// "The guard loop", Algorithm 1): the state the session keeps between
// steps (the user's request, m_{t−1}, the previous action) and what the
// agent reports now (the previous action's observation, new user messages,
// the pending action a_t).
type StepInput struct {
	UserPrompt   string          // the user's request q_0, shown to the memory at the first step
	First        bool            // the session's first step (t = 1)
	Memory       string          // m_{t−1} ("" at the first step)
	Previous     *dataset.Action // a_{t−1}, nil at the first step
	Observation  string          // o_{t−1}, the previous action's observation (raw: elided here as in Run)
	UserMessages []string        // user messages that arrived since the last step, in order
	Action       dataset.Action  // the pending action a_t
}

// events returns what the memory sees at this step, in the order Run's
// episodes show it: the user's request at the first step, the previous
// action with its observation, then the new user messages.
func (in *StepInput) events(observation string) Events {
	var ev Events
	if in.First {
		ev = append(ev, Event{User: &in.UserPrompt})
	}
	if in.Previous != nil {
		ev = append(ev, Event{Action: in.Previous, Observation: observation})
	}
	for i := range in.UserMessages {
		ev = append(ev, Event{User: &in.UserMessages[i]})
	}
	return ev
}

// Step runs one step of the MAGE guard loop for each input, batched across
// inputs: all memory calls together (m_t = M(m_{t−1}, s_{t−1})), then all
// judge calls together (d_t = J(a_t | m_t)), with the prompts, elision,
// parsing and fallbacks of Run, so a session driven step by step through a
// trajectory gets the turns Run gives that trajectory (greedily decoded,
// batch for batch). The returned turns carry the calls, m_t (MemoryOut),
// the decision, rationale and score; Index and Label are left zero.
// Sampling seeds are derived from s.Seed.
func (g *Guard) Step(inputs []StepInput, s Sampling) ([]Turn, Stats, error) {
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

	reqs := make([]Request, len(inputs))
	calls := make([]*Call, len(inputs))
	shown := make([]StepInput, len(inputs)) // as the prompts show them: elided as in Run
	for k := range inputs {
		shown[k] = g.elideStep(&inputs[k], &stats)
		in := &shown[k]
		calls[k] = g.newCall(g.prompts.Memory(in.Memory, in.events(in.Observation)), MemoryRole)
		reqs[k] = g.request(calls[k], MemoryRole)
	}
	if err := g.generate(reqs, calls, s, 0, &stats); err != nil {
		return nil, stats, fmt.Errorf("memory calls of %d sessions: %w", len(inputs), err)
	}
	for k := range inputs {
		turns[k].Memory = calls[k]
		turns[k].MemoryOut = g.memoryOutcome(calls[k], inputs[k].Memory, &stats)
	}

	for k := range inputs {
		calls[k] = g.newCall(g.prompts.Judge(turns[k].MemoryOut, shown[k].Action), JudgeRole)
		reqs[k] = g.request(calls[k], JudgeRole)
	}
	if err := g.generate(reqs, calls, s, 1, &stats); err != nil {
		return nil, stats, fmt.Errorf("judge calls of %d sessions: %w", len(inputs), err)
	}
	for k := range inputs {
		j := g.judgeOutcome(calls[k], &stats)
		turns[k].Judge = *calls[k]
		turns[k].Decision, turns[k].Rationale = j.Decision, j.Rationale
		turns[k].Score, turns[k].ScoreExact = j.Score, j.ScoreExact
	}
	return turns, stats, nil
}

// elideStep returns in with its untrusted texts as the prompts show them,
// elided as Run's view elides them (elide.go): the user's request and
// messages to rollout.max_user_tokens, the observation to
// max_observation_tokens, the previous and pending actions by ElideAction.
func (g *Guard) elideStep(in *StepInput, stats *Stats) StepInput {
	out := *in
	user := func(text string) string {
		text, elided := ElideText(g.tok, text, g.cfg.MaxUserTokens)
		if elided > 0 {
			stats.ElidedUsers++
			stats.ElidedUserTokens += elided
		}
		return text
	}
	out.UserPrompt = user(in.UserPrompt)
	out.UserMessages = make([]string, len(in.UserMessages))
	for i, m := range in.UserMessages {
		out.UserMessages[i] = user(m)
	}
	out.Observation = ""
	if in.Previous != nil {
		var elided int
		out.Observation, elided = ElideObservation(g.tok, in.Observation, g.cfg.MaxObservationTokens)
		if elided > 0 {
			stats.ElidedObs++
			stats.ElidedTokens += elided
		}
		// Counted when it was the pending action, as Run counts each action once.
		prev := ElideAction(g.tok, *in.Previous, g.cfg.MaxArgumentTokens, g.cfg.MaxActionTokens, &Stats{})
		out.Previous = &prev
	}
	out.Action = ElideAction(g.tok, in.Action, g.cfg.MaxArgumentTokens, g.cfg.MaxActionTokens, stats)
	return out
}

// memoryOutcome parses a memory call (marking it parsed or recording its
// violation) and returns m_t: the new memory, or prev on a violation.
func (g *Guard) memoryOutcome(c *Call, prev string, stats *Stats) string {
	call, err := ParseMemory(c.Text)
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
	j, err := ParseJudgement(c.Text)
	if err != nil {
		c.Violation = err.Error()
		stats.JudgeFailures++
		return Judgement{Decision: DecisionReject, Rationale: FallbackRationale, Score: 1}
	}
	c.Parsed = true
	score, exact := g.watch.score(g.tok, c, j, g.grammar[JudgeRole] != nil)
	return Judgement{Decision: j.Decision, Rationale: j.Rationale, Score: score, ScoreExact: exact}
}
