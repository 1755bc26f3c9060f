package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/internal/doccmd"
)

// TestDocCommandsParse: every mageguard command README.md and docs/*.md
// show (code blocks and inline spans; docs/history.md, a record of past
// runs, aside) names a command that exists, with flags it takes and the
// arguments it wants; `make docs-check` runs the runnable ones.
func TestDocCommandsParse(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	n := 0
	for _, f := range files {
		if filepath.Base(f) == "history.md" {
			continue
		}
		cs, err := doccmd.Extract(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			n++
			if err := parseOnly(c.Args); err != nil && !placeholderValue(err, c) {
				t.Errorf("%s: %v", c, err)
			}
		}
	}
	if n < 50 {
		t.Errorf("found only %d commands in the docs", n)
	}
}

// parseOnly parses args as mageguard would, running nothing: the command
// is found, its flags parsed, its positional arguments checked.
func parseOnly(args []string) error {
	global = globalFlags{}
	root := newRootCmd()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return flagError(cmd, err)
	}
	return cmd.ValidateArgs(cmd.Flags().Args())
}

// placeholderRE matches pflag's error for a typed flag given a word.
var placeholderRE = regexp.MustCompile(`invalid argument "([A-Z]+)" for`)

// placeholderValue reports whether err is only a syntax summary's
// placeholder (--seed S) given to a typed flag, or, in an inline span, a
// flag named without its value ("`mageguard mcp --listen`" in prose).
func placeholderValue(err error, c doccmd.Command) bool {
	if placeholderRE.MatchString(err.Error()) {
		return true
	}
	return c.Inline && strings.Contains(err.Error(), "flag needs an argument")
}
