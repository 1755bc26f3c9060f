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
	keepStdoutForData(root)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "mageguard:", err)
		os.Exit(1)
	}
}

// keepStdoutForData gives the process's stdout to root's commands, which
// write their data through cmd.OutOrStdout, and points os.Stdout at stderr:
// a line a library prints with fmt.Print (simplego's "SimpleGo backend:
// parallelism set to N", whenever a go backend is built) is then logged
// with the rest, never mixed into the data. Once, at start-up.
func keepStdoutForData(root *cobra.Command) {
	root.SetOut(os.Stdout)
	os.Stdout = os.Stderr
}
