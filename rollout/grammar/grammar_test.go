package grammar

import (
	"encoding/json"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
)

// toyVocab is a small vocabulary with greedy longest-match encoding: every
// printable ASCII byte, a few multi-byte words and JSON pieces, and two added
// tokens, enough to exercise every path of the grammar.
type toyVocab struct {
	toks  []string
	added map[int]bool
}

func newToyVocab() *toyVocab {
	v := &toyVocab{added: map[int]bool{}}
	for b := 0; b < 128; b++ {
		v.toks = append(v.toks, string(rune(b)))
	}
	v.toks = append(v.toks, "approve", "reject", "rej", "app", `"}}`, `"}`, `",`, `": "`, `"\n`, "hello", " world", "\\n")
	for _, w := range []string{"<tool_call>", "</tool_call>", "<|im_end|>"} {
		v.added[len(v.toks)] = true
		v.toks = append(v.toks, w)
	}
	return v
}

func (v *toyVocab) VocabSize() int      { return len(v.toks) }
func (v *toyVocab) IsAdded(id int) bool { return v.added[id] }
func (v *toyVocab) id(s string) int {
	for i, t := range v.toks {
		if t == s {
			return i
		}
	}
	return -1
}
func (v *toyVocab) Decode(ids []int, skipSpecial bool) string {
	var b strings.Builder
	for _, id := range ids {
		if skipSpecial && v.added[id] {
			continue
		}
		b.WriteString(v.toks[id])
	}
	return b.String()
}
func (v *toyVocab) Encode(s string) []int {
	var ids []int
	for len(s) > 0 {
		best := -1
		for i, t := range v.toks {
			if strings.HasPrefix(s, t) && (best < 0 || len(t) > len(v.toks[best])) {
				best = i
			}
		}
		ids = append(ids, best)
		s = s[len(v.toks[best]):]
	}
	return ids
}

const judgeTemplate = "<tool_call>\n{\"name\": \"assess_risk\", \"arguments\": {\"decision\": \"{choice:approve|reject}\", \"rationale\": \"{string}\"}}\n</tool_call>"

// sample draws one completion under the grammar with a uniformly random
// "model": every allowed token equally likely.
func sample(t *testing.T, g *Grammar, v *toyVocab, budget int, rng *rand.Rand) (ids []int, forced int) {
	d := g.NewDecoder(budget)
	for !d.Done() {
		if len(ids) >= budget {
			t.Fatalf("budget %d exceeded: %q", budget, v.Decode(ids, false))
		}
		c := d.Next()
		var tok int
		switch {
		case c.Force >= 0:
			tok = c.Force
			forced++
		case c.Allowed != nil:
			tok = c.Allowed[rng.IntN(len(c.Allowed))]
		default:
			banned := map[int]bool{}
			for _, id := range c.Banned {
				banned[id] = true
			}
			for {
				tok = rng.IntN(v.VocabSize())
				if !banned[tok] {
					break
				}
			}
		}
		if err := d.Advance(tok); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tok)
	}
	return ids, forced
}

func TestGrammarAlwaysProducesAValidCall(t *testing.T) {
	v := newToyVocab()
	stop := v.id("<|im_end|>")
	g, err := NewGrammar(v, judgeTemplate, stop)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	decisions := map[string]int{}
	for _, budget := range []int{g.MinBudget(), g.MinBudget() + 1, g.MinBudget() + 5, 80} {
		for i := 0; i < 200; i++ {
			ids, _ := sample(t, g, v, budget, rng)
			text := v.Decode(ids, false)
			if !strings.HasSuffix(text, "<|im_end|>") {
				t.Fatalf("no stop token: %q", text)
			}
			body := strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(text, "<|im_end|>"), "<tool_call>\n"), "\n</tool_call>")
			var call struct {
				Name      string
				Arguments struct{ Decision, Rationale string }
			}
			if err := json.Unmarshal([]byte(body), &call); err != nil {
				t.Fatalf("budget %d: %q is not a valid call: %v", budget, text, err)
			}
			if call.Name != "assess_risk" || (call.Arguments.Decision != "approve" && call.Arguments.Decision != "reject") {
				t.Fatalf("bad call %q", text)
			}
			decisions[call.Arguments.Decision]++
		}
	}
	if decisions["approve"] == 0 || decisions["reject"] == 0 {
		t.Fatalf("the choice was never free: %v", decisions)
	}
}

func TestGrammarMinBudgetIsTheFixedPart(t *testing.T) {
	v := newToyVocab()
	g, err := NewGrammar(v, judgeTemplate, v.id("<|im_end|>"))
	if err != nil {
		t.Fatal(err)
	}
	// With the smallest budget the string is empty and everything is forced
	// except the decision.
	rng := rand.New(rand.NewPCG(3, 4))
	ids, forced := sample(t, g, v, g.MinBudget(), rng)
	if len(ids)-forced > 2 { // "approve"/"reject" is one token, or "app"/"rej" + rest
		t.Fatalf("%d free tokens at min budget: %q", len(ids)-forced, v.Decode(ids, false))
	}
	if !strings.Contains(v.Decode(ids, false), `"rationale": ""}}`) {
		t.Fatalf("rationale not empty at min budget: %q", v.Decode(ids, false))
	}
}

func TestGrammarBansStringBreakers(t *testing.T) {
	v := newToyVocab()
	g, err := NewGrammar(v, judgeTemplate, v.id("<|im_end|>"))
	if err != nil {
		t.Fatal(err)
	}
	var banned []string
	for _, id := range g.banned {
		banned = append(banned, v.toks[id])
	}
	sort.Strings(banned)
	for _, want := range []string{"\\", "\n", `": "`, `",`, `"\n`, "\\n", "<tool_call>", "<|im_end|>"} {
		if !contains(banned, want) {
			t.Errorf("%q is not banned inside a string", want)
		}
	}
	// Closers: '"' + a prefix of the closing text `"}}\n</tool_call>`.
	var closers []string
	for _, text := range g.closers {
		closers = append(closers, text)
	}
	sort.Strings(closers)
	if strings.Join(closers, " ") != `" "} "}}` {
		t.Fatalf("closers %q", closers)
	}
	if contains(banned, `"}}`) || contains(banned, "hello") {
		t.Fatal("a closer or a safe token is banned")
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
