// Package doccmd finds the mageguard commands a markdown file shows, so
// that a test can check that each one parses (its subcommand, flags and
// arguments exist) and `make docs-check` can run the runnable ones as
// written. Commands come from fenced code blocks (sh, bash, shell,
// console or none: a line, with its
// backslash continuations, that runs mageguard, alone or after a pipe;
// simple NAME=value lines of the block are substituted) and from inline
// code spans that start with "mageguard " (usage summaries, with [ ], |
// or …, are marked Syntax).
package doccmd

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Command is one mageguard command shown in a markdown file.
type Command struct {
	File   string
	Line   int
	Shell  string   // the whole line as a shell runs it (variables substituted, comment dropped)
	Args   []string // mageguard's arguments (after the program's name), shell words
	Inline bool     // from an inline code span, not a code block
	// Syntax marks a usage summary ([optional] flags, a|b, …): Args then
	// hold its words without brackets, the first of each a|b, no ellipsis,
	// fit for parsing, not for running.
	Syntax bool
}

func (c Command) String() string { return fmt.Sprintf("%s:%d: %s", c.File, c.Line, c.Shell) }

var (
	assignRE = regexp.MustCompile(`^([A-Z_][A-Z0-9_]*)=(\S+)\s*(#.*)?$`)
	varRE    = regexp.MustCompile(`\$\{?([A-Z_][A-Z0-9_]*)\}?`)
	spanRE   = regexp.MustCompile("`(mageguard [^`]+)`")
	progRE   = regexp.MustCompile(`(^|\|\s*)(bin/)?mageguard(\s|$)`)
)

// shellFence are the code-block languages whose lines are commands.
var shellFence = map[string]bool{"": true, "sh": true, "bash": true, "shell": true, "console": true}

// Extract returns the commands of the markdown file path, in file order.
func Extract(path string) ([]Command, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Command
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	inBlock, skipBlock, line, start := false, false, 0, 0
	vars := map[string]string{}
	var pending string
	for sc.Scan() {
		line++
		text := sc.Text()
		if fence, ok := strings.CutPrefix(strings.TrimSpace(text), "```"); ok {
			switch {
			case skipBlock: // the end of a text, json, yaml … block
				skipBlock = false
			case !inBlock && !shellFence[strings.TrimSpace(fence)]:
				skipBlock = true
			default:
				inBlock, pending, vars = !inBlock, "", map[string]string{}
			}
			continue
		}
		if skipBlock {
			continue
		}
		if !inBlock {
			for _, m := range spanRE.FindAllStringSubmatch(text, -1) {
				if c, ok := command(path, line, m[1], nil); ok {
					c.Inline = true
					out = append(out, c)
				}
			}
			continue
		}
		s := strings.TrimSpace(text)
		if pending == "" {
			start = line
		}
		if strings.HasSuffix(s, "\\") {
			pending += strings.TrimSuffix(s, "\\") + " "
			continue
		}
		s, pending = pending+s, ""
		if m := assignRE.FindStringSubmatch(s); m != nil {
			vars[m[1]] = m[2]
			continue
		}
		if c, ok := command(path, start, s, vars); ok {
			out = append(out, c)
		}
	}
	return out, sc.Err()
}

// command reads a shell line that runs mageguard: its comment dropped,
// vars substituted, mageguard's arguments split into words.
func command(path string, line int, s string, vars map[string]string) (Command, bool) {
	s = strings.TrimSpace(stripComment(s))
	loc := progRE.FindStringSubmatchIndex(s)
	if loc == nil {
		return Command{}, false
	}
	s = varRE.ReplaceAllStringFunc(s, func(v string) string {
		if val, ok := vars[varRE.FindStringSubmatch(v)[1]]; ok {
			return val
		}
		return v
	})
	loc = progRE.FindStringSubmatchIndex(s)
	rest := s[loc[1]:]
	syntax := strings.ContainsAny(rest, "[]…") || strings.Contains(rest, "...") || strings.Contains(rest, `\|`)
	ends := "|;&><" // the next command of a pipeline or list, a redirection
	if syntax {
		rest, ends = strings.ReplaceAll(rest, `\|`, "|"), ";&><" // a bar is an alternative (a table's escaped)
	}
	if i := strings.IndexAny(rest, ends); i >= 0 && !inQuotes(rest, i) {
		rest = rest[:i]
	}
	words, ok := split(rest)
	if !ok {
		return Command{}, false
	}
	c := Command{File: path, Line: line, Shell: s, Args: words}
	if syntax {
		c.Syntax, c.Args = true, nil
		for _, w := range words {
			if w == "|" { // alternatives: the first one
				break
			}
			w = strings.Trim(w, "[]()…")
			w = strings.TrimSuffix(w, "...")
			if first, _, ok := strings.Cut(w, "|"); ok {
				w = strings.Trim(first, "[]")
			}
			if w != "" {
				c.Args = append(c.Args, w)
			}
		}
	}
	return c, true
}

// stripComment drops a " # comment" outside quotes.
func stripComment(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t') && !inQuotes(s, i) {
			return s[:i]
		}
	}
	return s
}

// inQuotes reports whether byte i of s is inside single or double quotes.
func inQuotes(s string, i int) bool {
	var q byte
	for j := 0; j < i; j++ {
		switch {
		case q == 0 && (s[j] == '\'' || s[j] == '"'):
			q = s[j]
		case q != 0 && s[j] == q:
			q = 0
		}
	}
	return q != 0
}

// split splits s into shell words (spaces, single and double quotes; no
// escapes inside them); false for an unclosed quote.
func split(s string) ([]string, bool) {
	var words []string
	var cur strings.Builder
	inWord := false
	var q byte
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case q != 0 && ch == q:
			q = 0
		case q != 0:
			cur.WriteByte(ch)
		case ch == '\'' || ch == '"':
			q, inWord = ch, true
		case ch == ' ' || ch == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	if q != 0 {
		return nil, false
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, true
}
