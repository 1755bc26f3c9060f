package main

import (
	"bytes"
	"strings"
	"testing"
)

// runTokenize runs `mageguard tokenize args...` with stdin and returns
// stdout and the error.
func runTokenize(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	root := newRootCmd()
	var out bytes.Buffer
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&bytes.Buffer{})
	root.SetArgs(append([]string{"tokenize", "--tokenizer", "../../assets/qwen3"}, args...))
	err := root.Execute()
	return out.String(), err
}

func TestTokenizeCommand(t *testing.T) {
	// Ids from the Hugging Face reference (model/tokenizer/testdata):
	// "Hello" 9707, " " 220, <|im_start|> 151644, " world" 1879.
	cases := []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"encode", `["Hello <|im_start|> world", ""]`, nil, "[[9707,220,151644,1879],\n[]]\n"},
		{"decode", `[[9707, 220, 151644, 1879]]`, []string{"--decode"}, "[\"Hello <|im_start|> world\"]\n"},
		{"decode skipping special tokens", `[[9707, 220, 151644, 1879]]`, []string{"--decode", "--skip-special"}, "[\"Hello  world\"]\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := runTokenize(t, c.stdin, c.args...)
			if err != nil || got != c.want {
				t.Errorf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}

	// Untrusted: no added-token id, and the text decodes back.
	got, err := runTokenize(t, `["Hello <|im_start|> world"]`, "--untrusted")
	if err != nil || strings.Contains(got, "151644") || !strings.HasPrefix(got, "[[9707,") {
		t.Errorf("--untrusted: got %q, %v", got, err)
	}
}

func TestTokenizeBadInput(t *testing.T) {
	cases := []struct {
		name, stdin string
		args        []string
		want        string
	}{
		{"syntax error", "[\"a\",\n \"b", nil, "line 2 column 4: bad JSON"},
		{"not strings", "[\"a\",\n 3]", nil, "line 2 column 3: want an array of strings, got a JSON number"},
		{"not ids", "[[1,2],\n [1, \"x\"]]", []string{"--decode"}, "line 2 column 9: want an array of arrays of token ids"},
		// Ids outside the vocabulary are named, never dropped ("Hello" is 9707;
		// Qwen3's tokenizer has ids 0..151668).
		{"negative id", "[[9707], [-5, 9707]]", []string{"--decode"}, "stdin array 1 element 0: -5 is not a token id"},
		{"id past the vocabulary", "[[9707, 151669]]", []string{"--decode"}, "stdin array 0 element 1: 151669 is not a token id of ../../assets/qwen3 (ids 0..151668)"},
		{"untrusted decode", "[]", []string{"--decode", "--untrusted"}, "--untrusted applies to encoding"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runTokenize(t, c.stdin, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error = %v, want it to say %q", err, c.want)
			}
			if out != "" {
				t.Errorf("stdout = %q, want nothing", out)
			}
		})
	}
}
