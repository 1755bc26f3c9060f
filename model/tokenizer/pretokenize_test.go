package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// split returns the pre-tokens of s.
func split(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := pieceEnd(s, i)
		out = append(out, s[i:j])
		i = j
	}
	return out
}

// TestSplitByHand pins down each alternative of the pattern on cases worked
// out by hand from the regex.
func TestSplitByHand(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"don't", []string{"don", "'t"}},                                         // 1
		{"I'M we'LL they'Re", []string{"I", "'M", " we", "'LL", " they", "'Re"}}, // 1, any case
		{"it'ſ", []string{"it", "'ſ"}},                                           // 1: ſ folds to s
		{"'x", []string{"'x"}},                                                   // not a contraction: 2
		{"''s", []string{"''", "s"}},                                             // 4 takes the run "''", so no contraction starts
		{"hello world", []string{"hello", " world"}},                             // 2 with a leading space
		{"\tword", []string{"\tword"}},                                           // 2 with a leading tab
		{"\nword", []string{"\n", "word"}},                                       // a newline never leads 2
		{"(abc)", []string{"(abc", ")"}},                                         // 2 with leading punctuation
		{"x12y", []string{"x", "1", "2", "y"}},                                   // 3: one digit each
		{"a ?!\n\nb", []string{"a", " ?!\n\n", "b"}},                             // 4 with space and newlines
		{"a  ?", []string{"a", " ", " ?"}},                                       // 6 then 4
		{"a \n b", []string{"a", " \n", " b"}},                                   // 5 then 2
		{"a\n \n  b", []string{"a", "\n \n", " ", " b"}},                         // 5, 6, 2
		{"x   ", []string{"x", "   "}},                                           // 6 at the end of the text
		{"x   y", []string{"x", "  ", " y"}},                                     // 6 leaves the last space
		{"\t\t1", []string{"\t", "\t", "1"}},                                     // 6, 7, 3
		{" ", []string{" "}},                                                     // 6
		{"a\u00a0\u3000b", []string{"a", "\u00a0", "\u3000b"}},                   // Unicode spaces
	}
	for _, c := range cases {
		if got := split(c.in); !slices.Equal(got, c.want) {
			t.Errorf("split(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// oracle is Qwen's pattern for Go's regexp: \s spelled out as Unicode
// White_Space (Go's \s is ASCII only), and the look-ahead alternative
// \s+(?!\S) left out; oracleSplit emulates it.
var oracle = func() *regexp.Regexp {
	ws := `\t\n\v\f\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}`
	return regexp.MustCompile(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\pL\pN]?\pL+|\pN| ?[^` + ws + `\pL\pN]+[\r\n]*|[` + ws + `]*[\r\n]+|[` + ws + `]+`)
}()

// oracleSplit splits s with Go's regexp. A whitespace run without newline
// matched by the last alternative is what \s+(?!\S) would have matched
// without its last character when a non-space follows; the regexp is then
// run again from that character.
func oracleSplit(s string) []string {
	var out []string
	for pos := 0; pos < len(s); {
		loc := oracle.FindStringIndex(s[pos:])
		if loc == nil || loc[0] != 0 {
			return append(out, "NO MATCH AT "+s[pos:])
		}
		m := s[pos : pos+loc[1]]
		if pos+loc[1] < len(s) && strings.IndexFunc(m, func(r rune) bool { return !unicode.IsSpace(r) }) < 0 &&
			!strings.ContainsAny(m, "\r\n") && utf8.RuneCountInString(m) > 1 {
			_, last := utf8.DecodeLastRuneInString(m)
			m = m[:len(m)-last]
		}
		out = append(out, m)
		pos += len(m)
	}
	return out
}

func observations(tb testing.TB) []string {
	tb.Helper()
	f, err := os.Open("testdata/agentdojo_observations.json.gz")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var obs []string
	if err := json.NewDecoder(zr).Decode(&obs); err != nil {
		tb.Fatal(err)
	}
	return obs
}

// TestSplitMatchesRegexp compares the hand-written pre-tokenizer with Go's
// regexp engine on the reference corpus and the AgentDojo observations.
func TestSplitMatchesRegexp(t *testing.T) {
	var corpus []string
	data, err := os.ReadFile("testdata/corpus_public.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &corpus); err != nil {
		t.Fatal(err)
	}
	for _, s := range append(corpus, observations(t)...) {
		if got, want := split(s), oracleSplit(s); !slices.Equal(got, want) {
			t.Errorf("split(%q)\n got %q\nwant %q", s, got, want)
		}
	}
}

// FuzzSplit checks the pre-tokenizer against the regexp oracle and that its
// pieces tile the input. Run: go test -fuzz FuzzSplit ./model/tokenizer
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"don't  stop\n\n x", "a\u00a0 \u3000b", "'S'll'VE", "x²³ ½ ٣", "\r\n\t \v\f", "é́ ̂z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // Encode replaces invalid UTF-8 before pre-tokenizing
		}
		got := split(s)
		if strings.Join(got, "") != s {
			t.Fatalf("pieces %q do not tile %q", got, s)
		}
		if want := oracleSplit(s); !slices.Equal(got, want) {
			t.Fatalf("split(%q)\n got %q\nwant %q", s, got, want)
		}
	})
}

func BenchmarkSplitByHand(b *testing.B) {
	obs := observations(b)
	size := 0
	for _, s := range obs {
		size += len(s)
	}
	b.SetBytes(int64(size))
	for b.Loop() {
		for _, s := range obs {
			for i := 0; i < len(s); i = pieceEnd(s, i) {
			}
		}
	}
}

// BenchmarkSplitRegexp is the same split with Go's regexp, for comparison.
func BenchmarkSplitRegexp(b *testing.B) {
	obs := observations(b)
	size := 0
	for _, s := range obs {
		size += len(s)
	}
	b.SetBytes(int64(size))
	for b.Loop() {
		for _, s := range obs {
			oracleSplit(s)
		}
	}
}
