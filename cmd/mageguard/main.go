// Command mageguard trains and evaluates MAGE guard models for LLM agents.
// This package only wires: flags, configuration, and calls into the packages
// that do the work. Data goes to stdout; logs and progress go to stderr.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "mageguard:", err)
		os.Exit(1)
	}
}
