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
	for _, pt := range g.parts {
		switch pt.kind {
		case fixedPiece:
			b.WriteString(regexQuote(pt.text))
		case stringPiece:
			b.WriteString(`[^"\\\x00-\x1f\x7f]*`)
		case choicePiece:
			opts := make([]string, len(pt.options))
			for j, o := range pt.options {
				opts[j] = regexQuote(o)
			}
			b.WriteString("(" + strings.Join(opts, "|") + ")")
		}
	}
	return b.String()
}

// regexQuote escapes regular-expression metacharacters and writes a
// newline as \n.
func regexQuote(s string) string {
	return strings.ReplaceAll(regexp.QuoteMeta(s), "\n", `\n`)
}
