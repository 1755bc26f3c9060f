// Command mageguard trains and evaluates MAGE guard models for LLM agents.
// This package only wires: flags, configuration, and calls into the packages
// that do the work. Data goes to stdout; logs and progress go to stderr.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := newRootCmd()
	keepStdoutForData(root, os.Args[1:])
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "mageguard:", err)
		os.Exit(1)
	}
}

// keepStdoutForData gives the process's stdout to root's commands, which
// write their data through cmd.OutOrStdout, and points os.Stdout away from
// it: a line a library prints with fmt.Print (simplego's "SimpleGo backend:
// parallelism set to N", whenever a go backend is built) is never mixed
// into the data; it goes to stderr with -v (--verbose) among args, else
// nowhere. Once, at start-up.
func keepStdoutForData(root *cobra.Command, args []string) {
	root.SetOut(os.Stdout)
	os.Stdout = os.Stderr
	if !verbose(args) {
		if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
			os.Stdout = null
		}
	}
}

// verbose reports whether args hold -v or --verbose before a "--" (mcp's
// upstream command follows it).
func verbose(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-v", "--verbose", "--verbose=true":
			return true
		}
	}
	return false
}
