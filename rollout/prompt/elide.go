package prompt

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/model/tokenizer"
)

// Elision keeps every untrusted text a prompt shows to a bounded number of
// tokens, so that one huge observation, argument or user message cannot
// make a prompt longer than the model takes (which failed the whole
// generation batch, and with it the run). A text of more than its limit
// keeps its first and last tokens around an explicit marker saying how many
// were left out — never a silent cut — and the guard loop counts them:
//
//   - an observation: rollout.max_observation_tokens;
//   - the user's request and later user messages: rollout.max_user_tokens;
//   - in an action, the tool's name and every string value of its
//     arguments (at any depth, keys included): rollout.max_argument_tokens
//     each, elided in place so the arguments stay valid JSON with their
//     other values whole (a short recipient beside a huge body stays
//     visible);
//   - the whole action after that, when still longer than
//     rollout.max_action_tokens (many values, huge numbers or arrays): its
//     arguments become {"elided_arguments_json": "<head … tail of their
//     JSON text>"}.

// ElideText keeps a text of more than max tokens to its first max/2 and
// last max−max/2 tokens with an explicit marker between them, and returns
// the text and the number of tokens left out (0: unchanged).
func ElideText(tok *tokenizer.Tokenizer, text string, max int) (string, int) {
	if len(text) <= max { // a token is at least one byte
		return text, 0
	}
	ids := tok.EncodeUntrusted(text)
	if len(ids) <= max {
		return text, 0
	}
	head, tail := max/2, max-max/2
	elided := len(ids) - head - tail
	h := strings.TrimRight(tok.Decode(ids[:head], false), "\uFFFD")
	t := strings.TrimLeft(tok.Decode(ids[len(ids)-tail:], false), "\uFFFD")
	return h + fmt.Sprintf("\n[... %d tokens elided ...]\n", elided) + t, elided
}

// ElideBytes keeps a text of more than max bytes to its head and tail
// around an explicit marker saying how many bytes were left out, all of it
// within max bytes and cut between whole UTF-8 characters; it returns the
// text and the bytes left out (0: unchanged). It bounds a text before it is
// tokenized or stored at all (a tool result of any size that becomes an
// observation); ElideText then bounds it in tokens for a prompt.
func ElideBytes(text string, max int) (string, int) {
	if len(text) <= max {
		return text, 0
	}
	marker := func(n int) string { return fmt.Sprintf("\n[... %d bytes elided ...]\n", n) }
	keep := max - len(marker(len(text))) // the marker of the longest count
	if keep < 2 {
		return "", len(text)
	}
	head := cutBack(text, keep/2)
	tail := cutForward(text, len(text)-(keep-keep/2))
	elided := tail - head
	return text[:head] + marker(elided) + text[tail:], elided
}

// cutBack is the largest i <= n at which s splits between whole UTF-8
// characters (a byte that does not continue a character).
func cutBack(s string, n int) int {
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return n
}

// cutForward is the smallest i >= n at which s splits between whole UTF-8
// characters.
func cutForward(s string, n int) int {
	for n < len(s) && !utf8.RuneStart(s[n]) {
		n++
	}
	return n
}

// elidedArgumentsKey holds an action's arguments elided as a whole.
const elidedArgumentsKey = "elided_arguments_json"

// ActionElision counts what ElideAction left out of an action.
type ActionElision struct {
	Arguments int // the name and argument strings elided in place (rollout.max_argument_tokens)
	Actions   int // 1 when the arguments were then elided as a whole (rollout.max_action_tokens)
	Tokens    int // the tokens left out by both
}

// ElideAction returns action a as the guard shows it (see the top of this
// file): its name and every string in its arguments elided to maxArg
// tokens each, then its arguments as a whole when the rendered action
// (ActionJSON) still has more than maxAction tokens; and what it left out.
func ElideAction(tok *tokenizer.Tokenizer, a dataset.Action, maxArg, maxAction int) (dataset.Action, ActionElision) {
	out := a
	var n ActionElision
	if name, k := ElideText(tok, a.Name, maxArg); k > 0 {
		out.Name = name
		n.Arguments++
		n.Tokens += k
	}
	if args, values, k := elideJSONStrings(tok, a.Arguments, maxArg); values > 0 {
		out.Arguments = args
		n.Arguments += values
		n.Tokens += k
	}
	rendered := ActionJSON(out)
	if len(rendered) <= maxAction || len(tok.EncodeUntrusted(rendered)) <= maxAction {
		return out, n
	}
	text, k := ElideText(tok, string(out.Arguments), maxAction)
	wrapped, err := json.Marshal(map[string]string{elidedArgumentsKey: text})
	if err != nil || k == 0 {
		return out, n // the name alone is long: it was elided above
	}
	out.Arguments = wrapped
	n.Actions++
	n.Tokens += k
	return out, n
}

// elideJSONStrings returns the JSON text raw with every string token (keys
// included) of more than max tokens elided in place, how many were, and
// the tokens left out. raw must be valid JSON; it is returned as it is when
// nothing is elided.
func elideJSONStrings(tok *tokenizer.Tokenizer, raw json.RawMessage, max int) (json.RawMessage, int, int) {
	var out []byte
	values, elided, last := 0, 0, 0
	for i := 0; i < len(raw); i++ {
		if raw[i] != '"' {
			continue
		}
		j := i + 1 // the closing quote (raw is valid JSON: outside strings there are no quotes)
		for j < len(raw) && raw[j] != '"' {
			if raw[j] == '\\' {
				j++
			}
			j++
		}
		if j >= len(raw) {
			break
		}
		token := raw[i : j+1]
		if j-i-1 > max {
			var s string
			if json.Unmarshal(token, &s) == nil {
				if text, n := ElideText(tok, s, max); n > 0 {
					out = append(out, raw[last:i]...)
					out = append(out, marshalString(text)...)
					last = j + 1
					values++
					elided += n
				}
			}
		}
		i = j
	}
	if values == 0 {
		return raw, 0, 0
	}
	return append(out, raw[last:]...), values, elided
}

// marshalString is a JSON string without HTML escaping.
func marshalString(s string) []byte {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return []byte(strings.TrimSuffix(b.String(), "\n"))
}
