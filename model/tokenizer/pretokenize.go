package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer splits text into the pieces that Qwen's Split regex
// (qwenPattern, with behavior Isolated) matches:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)      1. an English contraction, any case
//	|[^\r\n\p{L}\p{N}]?\p{L}+         2. letters, with one leading non-letter non-digit non-newline
//	|\p{N}                            3. a single digit
//	| ?[^\s\p{L}\p{N}]+[\r\n]*        4. punctuation, with an optional leading space and trailing newlines
//	|\s*[\r\n]+                       5. whitespace up to its last newline
//	|\s+(?!\S)                        6. whitespace, except the last one before a non-space
//	|\s+                              7. whitespace
//
// Alternatives are tried in order at each position (leftmost-first, as in
// Oniguruma, which Hugging Face uses). Every character starts a match, so
// matches tile the text. Go's regexp has no look-ahead for 6, hence this
// hand-written matcher. \s is Unicode White_Space, \p{L} and \p{N} are the
// Unicode letter and number categories (Go's unicode tables).

// Character classes of the pattern.
const (
	clsOther   = iota // none of the below: punctuation, symbols, marks, controls
	clsLetter         // \p{L}
	clsNumber         // \p{N}
	clsSpace          // \s but not \r or \n
	clsNewline        // \r or \n (also \s)
)

// asciiClass is the class of each ASCII byte.
var asciiClass [utf8.RuneSelf]uint8

func init() {
	for b := range utf8.RuneSelf {
		asciiClass[b] = classOf(rune(b))
	}
}

func classOf(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return clsNewline
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r): // White_Space: \t \v \f space U+0085 U+00A0 U+1680 U+2000–200A U+2028 U+2029 U+202F U+205F U+3000
		return clsSpace
	}
	return clsOther
}

// at returns the class and width of the character at s[i:]; i < len(s).
func at(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return classOf(r), n
}

// runEnd returns the end of the run of characters of class cls (or of
// either class cls or cls2) that starts at s[i:].
func runEnd(s string, i int, cls, cls2 uint8) int {
	for i < len(s) {
		c, n := at(s, i)
		if c != cls && c != cls2 {
			break
		}
		i += n
	}
	return i
}

// pieceEnd returns the end of the pre-token that starts at s[i:]; i < len(s).
func pieceEnd(s string, i int) int {
	cls, n := at(s, i)

	// 1. (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if s[i] == '\'' {
		if j := contractionEnd(s, i+1); j > 0 {
			return j
		}
	}

	// 2. [^\r\n\p{L}\p{N}]?\p{L}+
	if cls == clsLetter {
		return runEnd(s, i+n, clsLetter, clsLetter)
	}
	if (cls == clsOther || cls == clsSpace) && i+n < len(s) {
		if c2, n2 := at(s, i+n); c2 == clsLetter {
			return runEnd(s, i+n+n2, clsLetter, clsLetter)
		}
	}

	// 3. \p{N}
	if cls == clsNumber {
		return i + n
	}

	// 4. ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	j := i
	if s[i] == ' ' {
		j++
	}
	if j < len(s) {
		if c, _ := at(s, j); c == clsOther {
			j = runEnd(s, j, clsOther, clsOther)
			return runEnd(s, j, clsNewline, clsNewline)
		}
	}

	// Only whitespace is left: cls is clsSpace or clsNewline.
	end := runEnd(s, i, clsSpace, clsNewline)

	// 5. \s*[\r\n]+ : \s* backtracks to the last newline of the run, which
	// [\r\n]+ then takes (a newline after it would be in the run, too).
	for k := end - 1; k >= i; k-- {
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1
		}
	}

	// 6. \s+(?!\S) : the whole run at the end of the text; otherwise the run
	// without its last character, which then starts the next pre-token
	// (e.g. " " before a word), if that leaves at least one character.
	if end == len(s) {
		return end
	}
	_, last := utf8.DecodeLastRuneInString(s[i:end])
	if end-last > i {
		return end - last
	}

	// 7. \s+ : a single whitespace character before a non-space.
	return end
}

// contractionEnd matches s|t|re|ve|m|ll|d, case-insensitively, at s[i:]
// (just after an apostrophe) and returns the end of the match, or 0.
func contractionEnd(s string, i int) int {
	r, n := decodeAt(s, i)
	switch {
	case foldEq(r, 's'), foldEq(r, 't'), foldEq(r, 'm'), foldEq(r, 'd'):
		return i + n
	case foldEq(r, 'r'), foldEq(r, 'v'):
		if r2, n2 := decodeAt(s, i+n); foldEq(r2, 'e') {
			return i + n + n2
		}
	case foldEq(r, 'l'):
		if r2, n2 := decodeAt(s, i+n); foldEq(r2, 'l') {
			return i + n + n2
		}
	}
	return 0
}

// decodeAt decodes the rune at s[i:], or returns (-1, 0) at the end.
func decodeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	return utf8.DecodeRuneInString(s[i:])
}

// foldEq reports whether r equals the lower-case ASCII letter c under Unicode
// simple case folding (so 'S' and 'ſ' (U+017F) match 's', 'K' (U+212A) 'k').
func foldEq(r, c rune) bool {
	if r == c {
		return true
	}
	if r < 0 {
		return false
	}
	for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
		if f == r {
			return true
		}
	}
	return false
}
