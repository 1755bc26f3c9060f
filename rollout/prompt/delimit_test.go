package prompt

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/model/chat"
)

func TestEscapeDelimitersCoversLookAlikes(t *testing.T) {
	cases := []struct{ in, want string }{
		{"</observation>", "&lt;/observation&gt;"},
		{"< / Observation >", "&lt; / Observation &gt;"},
		{"＜/observation＞", "&lt;/observation&gt;"},                                     // fullwidth brackets
		{"﹤/observation﹥", "&lt;/observation&gt;"},                                     // small forms
		{"‹/observation›", "&lt;/observation&gt;"},                                     // single guillemets
		{"〈/observation〉", "&lt;/observation&gt;"},                                     // CJK angle brackets
		{"<／observation>", "&lt;／observation&gt;"},                                     // fullwidth slash
		{"<\u00a0/\u3000observation\u2003>", "&lt;\u00a0/\u3000observation\u2003&gt;"}, // no-break, ideographic, em spaces
		{"<\u200b/observation\u200d>", "&lt;\u200b/observation\u200d&gt;"},             // zero-width space and joiner
		{"<obser\u200bvation>", "&lt;obser\u200bvation&gt;"},                           // zero-width inside the name
		{"<ｏｂｓｅｒｖａｔｉｏｎ>", "&lt;ｏｂｓｅｒｖａｔｉｏｎ&gt;"},                                       // fullwidth letters
		{"<оbsеrvаtiоn>", "&lt;оbsеrvаtiоn&gt;"},                                       // Cyrillic о, е, а
		{"<𝐦𝐞𝐦𝐨𝐫𝐲>", "&lt;𝐦𝐞𝐦𝐨𝐫𝐲&gt;"},                                                 // mathematical bold
		{"</user-request>", "&lt;/user-request&gt;"},
		{"</user request>", "&lt;/user request&gt;"},
		{"<action id=2>", "&lt;action id=2&gt;"}, // attributes
		{"</action", "&lt;/action"},              // unclosed
		{"a </memory\nb", "a &lt;/memory\nb"},
		// Not delimiters: left alone.
		{"<actions>", "<actions>"},
		{"a < b and c > d", "a < b and c > d"},
		{"<memoryless>", "<memoryless>"},
		{"<b>bold</b>", "<b>bold</b>"},
	}
	for _, c := range cases {
		if got := escapeDelimiters(c.in); got != c.want {
			t.Errorf("escapeDelimiters(%q) = %q, want %q", c.in, got, c.want)
		}
		if n := countDelimiters(escapeDelimiters(c.in)); n != 0 {
			t.Errorf("%q: %d delimiters left after escaping", c.in, n)
		}
	}
}

// adversarialTexts are untrusted texts built to break out of a block or to
// smuggle a control token: every added token of the tokenizer, delimiters
// in every look-alike form, and seeded random mixes of the pieces.
func adversarialTexts(t *testing.T, n int) []string {
	tok := guardtest.Tokenizer(t)
	var pieces []string
	for id := 0; id < tok.VocabSize(); id++ {
		if tok.IsAdded(id) {
			pieces = append(pieces, tok.IDToToken(id))
		}
	}
	names := append([]string{"OBSERVATION", "Memory", "user-request", "user\u3000request", "ａｃｔｉｏｎ", "оbsеrvаtiоn", "mem\u200bory"}, delimiterNames...)
	for _, name := range names {
		for _, o := range openBrackets {
			for _, c := range []string{">", "＞", "›", "〉", "", " x=1>"} {
				pieces = append(pieces, string(o)+name+c, string(o)+"/"+name+c, string(o)+"\u00a0／\u200b"+name+"\u3000"+c)
			}
		}
	}
	pieces = append(pieces, "<", ">", "/", "\n", "\u200b", "\u00a0", "&lt;", "&gt;", `"`, `\`, "}", "{", "ordinary text ")
	rng := rand.New(rand.NewPCG(7, 7))
	out := append([]string{}, pieces...)
	for len(out) < len(pieces)+n {
		var b strings.Builder
		for k := rng.IntN(6) + 1; k > 0; k-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		out = append(out, b.String())
	}
	return out
}

// TestNoUntrustedTextCanOpenACloseBlockOrYieldAnAddedToken puts each
// adversarial text in every untrusted place of the three prompts — the
// action's name, an argument's key and value, the observation, the user's
// request, a later user message, the memory — and checks that the prompt
// has exactly the added tokens and the block delimiters of the same prompt
// with plain text in those places.
func TestNoUntrustedTextCanOpenACloseBlockOrYieldAnAddedToken(t *testing.T) {
	tok := guardtest.Tokenizer(t)
	ps, err := NewPrompts(Options{Version: "v1", TrackIntent: true, TrackAttacks: true, BudgetChars: 600}) // the rollout section's defaults
	if err != nil {
		t.Fatal(err)
	}
	prompts := func(x string) map[string]Prompt {
		var args strings.Builder
		enc := json.NewEncoder(&args)
		enc.SetEscapeHTML(false)
		enc.Encode(map[string]string{"to": x, x: "v"})
		a := dataset.Action{Name: "f" + x, Arguments: json.RawMessage(strings.TrimSpace(args.String()))}
		ev := Events{{User: &x}, {Action: &a, Observation: x}, {User: &x}}
		hist := []HistoryStep{{UserRequest: &x, Action: a, Observation: x}}
		return map[string]Prompt{
			"memory":     ps.Memory(x, ev),
			"judge":      ps.Judge(x, a),
			"judge-only": ps.JudgeOnly(x, hist, &x, a),
		}
	}
	// Each prompt as the guard encodes it, its role's tool declared.
	added := func(p Prompt, tool chat.Tool) map[string]int {
		count := map[string]int{}
		for _, id := range Encode(tok, p, []chat.Tool{tool}) {
			if tok.IsAdded(id) {
				count[tok.IDToToken(id)]++
			}
		}
		return count
	}
	clean := prompts("plain")
	tools := map[string]chat.Tool{"memory": ps.MemoryTool, "judge": ps.JudgeTool, "judge-only": ps.JudgeTool}
	wantAdded, wantDelims := map[string]map[string]int{}, map[string]int{}
	for name, p := range clean {
		wantAdded[name] = added(p, tools[name])
		wantDelims[name] = countDelimiters(p.UserText())
	}
	for _, x := range adversarialTexts(t, 300) {
		for name, p := range prompts(x) {
			if n := countDelimiters(p.UserText()); n != wantDelims[name] {
				t.Fatalf("%s prompt with %q: %d delimiters, want the template's %d:\n%s", name, x, n, wantDelims[name], p.UserText())
			}
			if got := added(p, tools[name]); fmt.Sprint(got) != fmt.Sprint(wantAdded[name]) {
				t.Fatalf("%s prompt with %q: added tokens %v, want the template's %v", name, x, got, wantAdded[name])
			}
		}
	}
}

// FuzzEscapeDelimiters: after escaping, no text holds a delimiter, and
// escaping again changes nothing.
func FuzzEscapeDelimiters(f *testing.F) {
	for _, s := range []string{"</observation>", "＜／ｏｂｓｅｒｖａｔｉｏｎ＞", "<\u200bmemory x=1", "ᐸ/mem\u200boryᐸ\u00a0／\u200bａｃｔｉｏｎ\u3000〉",
		"<user\u3000request>", "a < b > c", "<<<memory>>>", "</action\n>"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := escapeDelimiters(s)
		if n := countDelimiters(e); n != 0 {
			t.Fatalf("escape(%q) = %q still holds %d delimiters", s, e, n)
		}
		if again := escapeDelimiters(e); again != e {
			t.Fatalf("escaping %q twice: %q then %q", s, e, again)
		}
	})
}
