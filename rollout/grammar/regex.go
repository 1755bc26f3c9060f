package grammar

import (
	"regexp"
	"strings"
)

// Regex returns a regular expression that matches exactly the completions
// g allows as text (for a server's guided decoding): the call's fixed text,
// one of the enum values for a choice, and JSON string text without '"',
// '\' or control characters for a free string. (The local grammar also
// bans added tokens inside strings; a server's regex constrains text, not
// ids, and our parser judges the result.)
func Regex(g *Grammar) string {
	var b strings.Builder
	rest := g.template
	for rest != "" {
		i := strings.Index(rest, "{choice:")
		k := strings.Index(rest, "{string}")
		if i < 0 || (k >= 0 && k < i) {
			i = k
		}
		if i < 0 {
			b.WriteString(regexQuote(rest))
			break
		}
		b.WriteString(regexQuote(rest[:i]))
		rest = rest[i:]
		if strings.HasPrefix(rest, "{string}") {
			b.WriteString(`[^"\\\x00-\x1f\x7f]*`)
			rest = rest[len("{string}"):]
			continue
		}
		end := strings.Index(rest, "}")
		opts := strings.Split(rest[len("{choice:"):end], "|")
		for j := range opts {
			opts[j] = regexQuote(opts[j])
		}
		b.WriteString("(" + strings.Join(opts, "|") + ")")
		rest = rest[end+1:]
	}
	return b.String()
}

// regexQuote escapes regular-expression metacharacters and writes a
// newline as \n.
func regexQuote(s string) string {
	return strings.ReplaceAll(regexp.QuoteMeta(s), "\n", `\n`)
}
