package rollout

// The judge's decision score: the probability of "reject" read from the
// log-probs of the decision's first token.
//
// A judge call reads, at the step that emits the first token of the
// decision value (the token holding the value's first character, where
// "approve" and "reject" differ), the log-probs of the tokens that would
// begin each value there, under the same logits / temperature as the
// completion's log-probs and without the grammar's restriction:
//
//	score = p(reject) / (p(approve) + p(reject))
//
// With structured decoding the alternatives are exactly the two enum
// values' tokens at the first position where their token sequences differ
// (the choice the sampler makes, renormalised to the two). Without it, the
// emitted token holds some text P before the value (e.g. `"` when the model
// wrote `"reject` as one token, usually nothing) and p(v) sums the
// probabilities of every vocabulary token whose text is P followed by a
// non-empty prefix of v (or v and its closing quote): the ways of starting v
// after P in one token. A completion that is no valid call has no decision:
// its score is 1, the fallback reject's. When the log-probs of the
// alternatives are not known (a chat API without log-probs, a server's top-N
// that holds neither, an emitted token of an unforeseen shape), the score
// is the decision itself: 1 for reject, 0 for approve (ScoreExact false).

import (
	"encoding/json"
	"io"
	"math"
	"strings"

	"github.com/mageguard/mageguard/model/tokenizer"
	"github.com/mageguard/mageguard/rollout/prompt"
)

// decisionWatch knows, for one tokenizer, which token ids the judge calls
// watch and how they group into the alternatives of each value.
type decisionWatch struct {
	ids []int // the ids judge calls watch (Request.Watch)
	// free maps the text P before the value in the emitted token to the
	// indices into ids of the tokens that begin each value after P:
	// [0] approve, [1] reject.
	free map[string][2][]int
	// structured: the position (in tokens from the value's first token)
	// where the enum values' token sequences first differ, and the index
	// into ids of each value's token there.
	diverge int
	choice  [2]int
}

// valuePrefixes are the texts P that may precede the decision value inside
// the emitted token (the template writes `"decision": "reject"`).
var valuePrefixes = []string{"", `"`, ` "`, " ", `: "`, `:"`}

func newDecisionWatch(tok *tokenizer.Tokenizer) *decisionWatch {
	w := &decisionWatch{free: map[string][2][]int{}}
	index := map[int]int{}
	add := func(id int) int {
		if k, ok := index[id]; ok {
			return k
		}
		index[id] = len(w.ids)
		w.ids = append(w.ids, id)
		return index[id]
	}
	values := [2]string{prompt.DecisionApprove, prompt.DecisionReject}
	for _, p := range valuePrefixes {
		var classes [2][]int
		for v, value := range values {
			var texts []string
			for n := 1; n <= len(value); n++ {
				texts = append(texts, value[:n])
			}
			texts = append(texts, value+`"`, value+`",`)
			for _, x := range texts {
				if id, ok := tok.TokenID(strings.ReplaceAll(p+x, " ", "Ġ")); ok {
					classes[v] = append(classes[v], add(id))
				}
			}
		}
		if len(classes[0]) > 0 && len(classes[1]) > 0 {
			w.free[p] = classes
		}
	}
	a, r := tok.Encode(prompt.DecisionApprove), tok.Encode(prompt.DecisionReject)
	for w.diverge < min(len(a), len(r))-1 && a[w.diverge] == r[w.diverge] {
		w.diverge++
	}
	w.choice = [2]int{add(a[w.diverge]), add(r[w.diverge])}
	return w
}

// score returns the decision score of a judge call that parsed as j (see
// the file comment) and whether it was read from log-probs. structured says
// the call was decoded under the judge's grammar.
func (w *decisionWatch) score(tok *tokenizer.Tokenizer, c *Call, j prompt.ToolCall, structured bool) (float64, bool) {
	fallback := 0.0
	if j.Decision == prompt.DecisionReject {
		fallback = 1
	}
	if len(c.Watch) != len(c.Completion) || len(c.Completion) == 0 {
		return fallback, false
	}
	at := decisionOffset(c.Text)
	if at < 0 {
		return fallback, false
	}
	// The token holding byte at, and the text it holds before it.
	k, start := -1, 0
	for i := range c.Completion {
		end := len(tok.Decode(c.Completion[:i+1], false))
		if end > at {
			k = i
			break
		}
		start = end
	}
	if k < 0 {
		return fallback, false
	}
	var la, lr float64
	if structured {
		step := k + w.diverge
		if step >= len(c.Watch) {
			return fallback, false
		}
		la, lr = float64(c.Watch[step][w.choice[0]]), float64(c.Watch[step][w.choice[1]])
	} else {
		text := tok.Decode(c.Completion[k:k+1], false)
		if at-start > len(text) {
			return fallback, false
		}
		classes, ok := w.free[text[:at-start]]
		if !ok || !w.holds(classes[0], c.Completion[k]) && !w.holds(classes[1], c.Completion[k]) {
			return fallback, false
		}
		la, lr = logSumExp(c.Watch[k], classes[0]), logSumExp(c.Watch[k], classes[1])
	}
	if math.IsInf(la, -1) && math.IsInf(lr, -1) || math.IsNaN(la) || math.IsNaN(lr) {
		return fallback, false
	}
	// p_r / (p_a + p_r) = 1 / (1 + exp(la − lr)), safe for −Inf.
	return 1 / (1 + math.Exp(la-lr)), true
}

// holds reports whether the token id is one of the watched ids at indices.
func (w *decisionWatch) holds(indices []int, id int) bool {
	for _, k := range indices {
		if w.ids[k] == id {
			return true
		}
	}
	return false
}

// logSumExp returns log Σ exp(lp[k]) over the indices (−Inf for none).
func logSumExp(lp []float32, indices []int) float64 {
	m := math.Inf(-1)
	for _, k := range indices {
		m = math.Max(m, float64(lp[k]))
	}
	if math.IsInf(m, -1) {
		return m
	}
	s := 0.0
	for _, k := range indices {
		s += math.Exp(float64(lp[k]) - m)
	}
	return m + math.Log(s)
}

// decisionOffset returns the byte offset, in a judge completion that
// parsed, of the first character of the decision value: just after the
// opening quote of the value of "decision" inside "arguments"; -1 if not
// found.
func decisionOffset(text string) int {
	open := strings.Index(text, "<tool_call>")
	if open < 0 {
		return -1
	}
	base := open + len("<tool_call>")
	body := text[base:]
	dec := json.NewDecoder(strings.NewReader(body))
	depth := 0
	inArgs := false
	expectKey := false
	lastKey := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF || err != nil {
			return -1
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				depth++
				inArgs = depth == 2 && lastKey == "arguments"
				expectKey = true
			case '}':
				depth--
				expectKey = true // the parent object's next key, if any
			}
		case string:
			if expectKey {
				lastKey = t
				expectKey = false
				if inArgs && depth == 2 && t == "decision" {
					// The value's opening quote is the next '"' after the key.
					rest := body[dec.InputOffset():]
					q := strings.IndexByte(rest, '"')
					if q < 0 {
						return -1
					}
					return base + int(dec.InputOffset()) + q + 1
				}
				continue
			}
			expectKey = true
		default:
			expectKey = true
		}
	}
}
