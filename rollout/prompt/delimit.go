package prompt

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The guard's prompts put untrusted text (actions, observations, user
// messages, memories) in blocks delimited by <memory>, <user_request>,
// <action> and <observation> tags. The tags are ordinary text, so a copy in
// the untrusted text would tokenize like the real one and could open or
// close a block. To a language model, a tag also reads as one when it is
// written with look-alikes, so escapeDelimiters rewrites, in untrusted text,
// every '<' that starts something a reader could take for one of these
// tags, and its '>', as "&lt;" and "&gt;". It matches leniently:
//
//   - the angle brackets and the slash by their look-alikes: fullwidth
//     (＜ ＞ ／), small (﹤ ﹥), single guillemets (‹ ›), mathematical and CJK
//     angle brackets (⟨ ⟩ 〈 〉 〈 〉), modifier letters (˂ ˃), Canadian
//     syllabics (ᐸ ᐳ), and the division, fraction and big slashes (∕ ⁄ ⧸ ╱);
//   - any whitespace (Unicode's, not only ASCII: no-break, ideographic,
//     em spaces …) and invisible characters (zero-width spaces and joiners,
//     soft hyphens, word joiners, BOMs, variation selectors, combining
//     marks) around the brackets and the slash, and invisible characters
//     between the letters of the name;
//   - the name's letters in any case, in their compatibility forms
//     (fullwidth, mathematical: what NFKC maps to ASCII) and as the
//     Cyrillic and Greek letters that look the same; the underscore as
//     any run of underscores, hyphens, dashes or spaces;
//   - the tag unclosed, or with attributes ("<observation id=1>"): the '<'
//     is escaped whenever the name follows it and ends there (then a '>'
//     within the next 64 characters of the line is escaped too).

// delimiterNames are the tags of the prompts' blocks.
var delimiterNames = []string{"memory", "user_request", "action", "observation"}

// Look-alikes of '<', '>' and '/'.
const (
	openBrackets  = "<＜﹤‹〈〈⟨˂ᐸ"
	closeBrackets = ">＞﹥›〉〉⟩˃ᐳ"
	slashes       = "/／∕⁄⧸╱"
	joiners       = "_＿‗-‐‑‒–—―−﹣－" // what may stand for the underscore of user_request
)

// confusable maps Cyrillic and Greek letters to the ASCII letters they look like.
var confusable = map[rune]rune{
	'а': 'a', 'с': 'c', 'е': 'e', 'һ': 'h', 'і': 'i', 'ј': 'j', 'к': 'k', 'м': 'm', 'о': 'o', 'р': 'p',
	'ԛ': 'q', 'ѕ': 's', 'т': 't', 'у': 'y', 'х': 'x', 'ԁ': 'd', 'ո': 'n', 'ս': 'u', 'ν': 'v', 'ο': 'o',
	'α': 'a', 'ι': 'i', 'κ': 'k', 'ρ': 'p', 'τ': 't', 'υ': 'u', 'ε': 'e', 'μ': 'm', 'ѵ': 'v', 'ԝ': 'w',
	'ɑ': 'a', 'ı': 'i', 'ꭰ': 'd',
}

// invisible reports whether r renders as nothing (or only modifies its
// neighbour): format characters, combining marks, variation selectors.
func invisible(r rune) bool {
	return unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r) ||
		unicode.Is(unicode.Variation_Selector, r) || r == '\u034f' || r == '\u115f' || r == '\u1160' || r == '\u3164' || r == '\uffa0'
}

// blank reports whether r is whitespace or invisible.
func blank(r rune) bool { return unicode.IsSpace(r) || invisible(r) || unicode.Is(unicode.Zs, r) }

// letterOf returns the lowercase ASCII letter r stands for, or 0.
func letterOf(r rune) rune {
	if r < utf8.RuneSelf {
		r = unicode.ToLower(r)
		if r >= 'a' && r <= 'z' {
			return r
		}
		return 0
	}
	if c, ok := confusable[unicode.ToLower(r)]; ok {
		return c
	}
	if n := norm.NFKC.String(string(r)); len(n) == 1 {
		c := unicode.ToLower(rune(n[0]))
		if c >= 'a' && c <= 'z' {
			return c
		}
	}
	return 0
}

// delimiterAt reports whether a delimiter opens at byte i of s (s[i:] starts
// with an opening bracket), and returns where its closing bracket is
// (byte offset and width; -1 when unclosed).
func delimiterAt(s string, i int) (closeAt, closeLen int, ok bool) {
	_, w := utf8.DecodeRuneInString(s[i:])
	j := skip(s, i+w, blank)
	if r, w := utf8.DecodeRuneInString(s[j:]); j < len(s) && strings.ContainsRune(slashes, r) {
		j = skip(s, j+w, blank)
	}
	end := -1
	for _, name := range delimiterNames {
		if e := matchName(s, j, name); e >= 0 {
			end = e
			break
		}
	}
	if end < 0 {
		return 0, 0, false
	}
	if end < len(s) { // the name must end here (a bracket ends it: escaping one leaves a '&')
		r, _ := utf8.DecodeRuneInString(s[end:])
		bracket := strings.ContainsRune(openBrackets, r) || strings.ContainsRune(closeBrackets, r)
		if !bracket && (letterOf(r) != 0 || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			return 0, 0, false
		}
	}
	// Its closing bracket, if any, within the rest of the line.
	for k, n := end, 0; k < len(s) && n < 64; n++ {
		r, w := utf8.DecodeRuneInString(s[k:])
		if r == '\n' || strings.ContainsRune(openBrackets, r) {
			break
		}
		if strings.ContainsRune(closeBrackets, r) {
			return k, w, true
		}
		k += w
	}
	return -1, 0, true
}

// skip returns the first byte offset at or after i whose rune is not in class.
func skip(s string, i int, class func(rune) bool) int {
	for i < len(s) {
		r, w := utf8.DecodeRuneInString(s[i:])
		if !class(r) {
			break
		}
		i += w
	}
	return i
}

// matchName matches name at byte i of s leniently (see the top of this
// file) and returns where the match ends, or -1.
func matchName(s string, i int, name string) int {
	for k, c := range name {
		if k > 0 {
			i = skip(s, i, invisible)
		}
		if c == '_' {
			start := i
			i = skip(s, i, func(r rune) bool { return strings.ContainsRune(joiners, r) || blank(r) })
			if i == start {
				return -1
			}
			continue
		}
		if i >= len(s) {
			return -1
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if letterOf(r) != c {
			return -1
		}
		i += w
	}
	return i
}

// escapeDelimiters writes the opening bracket of every delimiter in
// untrusted text s (and its closing bracket) as "&lt;" ("&gt;").
func escapeDelimiters(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if !strings.ContainsRune(openBrackets, r) {
			i += w
			continue
		}
		closeAt, closeLen, ok := delimiterAt(s, i)
		if !ok {
			i += w
			continue
		}
		b.WriteString(s[last:i])
		b.WriteString("&lt;")
		if closeAt < 0 {
			last = i + w
			i += w
			continue
		}
		b.WriteString(s[i+w : closeAt])
		b.WriteString("&gt;")
		last = closeAt + closeLen
		i = last
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// countDelimiters counts the delimiters in s, escaped ones left out: what a
// reader could take for an opening or closing tag of a block.
func countDelimiters(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if strings.ContainsRune(openBrackets, r) {
			if _, _, ok := delimiterAt(s, i); ok {
				n++
			}
		}
		i += w
	}
	return n
}
