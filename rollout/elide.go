package rollout

import (
	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/rollout/prompt"
)

// elider elides untrusted texts to the guard's limits (prompt.ElideText,
// prompt.ElideAction), adding what it left out to stats. Run (through
// view) and Step (through prepare) take every untrusted text of their
// prompts through one, so eval and serve show the same text for the same
// input.
type elider struct {
	g     *Guard
	stats *Stats
}

// user elides the user's request or a later user message
// (rollout.max_user_tokens).
func (e elider) user(text string) string {
	out, n := prompt.ElideText(e.g.tok, text, e.g.cfg.MaxUserTokens)
	if n > 0 {
		e.stats.ElidedUsers++
		e.stats.ElidedUserTokens += n
	}
	return out
}

// observation elides an observation (rollout.max_observation_tokens).
func (e elider) observation(text string) string {
	out, n := prompt.ElideText(e.g.tok, text, e.g.cfg.MaxObservationTokens)
	if n > 0 {
		e.stats.ElidedObs++
		e.stats.ElidedTokens += n
	}
	return out
}

// action elides an action (rollout.max_argument_tokens, then
// rollout.max_action_tokens).
func (e elider) action(a dataset.Action) dataset.Action {
	out, n := prompt.ElideAction(e.g.tok, a, e.g.cfg.MaxArgumentTokens, e.g.cfg.MaxActionTokens)
	e.stats.ElidedArguments += n.Arguments
	e.stats.ElidedActions += n.Actions
	e.stats.ElidedActionTokens += n.Tokens
	return out
}

// ElideAction returns action a as the guard's prompts show it: elided as
// Run and Step elide a pending action (what a record of a decision, such
// as mageguard mcp's audit log, shows of the call the guard judged).
func (g *Guard) ElideAction(a dataset.Action) dataset.Action {
	return elider{g: g, stats: &Stats{}}.action(a)
}
