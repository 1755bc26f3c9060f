// Command serve-load runs the checks of `mageguard serve` under load over
// loopback (make serve-load, serve-crash, serve-abuse), each against a
// tiny random checkpoint served by the mageguard binary as its own
// process. Sessions follow turns of the bundled eval split, each
// session's steps in order as an agent loop sends them, with the "step"
// index so that a retry is safe. Run it from the repository root:
//
//	go run ./scripts/serve-load load  --bin bin/mageguard --out FILE [--sessions 32] [--steps 8]
//	go run ./scripts/serve-load crash --bin bin/mageguard [--sessions 16] [--steps 8] [--after 40]
//	go run ./scripts/serve-load abuse --bin bin/mageguard --out FILE [--steps 72]
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/mageguard/mageguard/scripts/internal/check"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: serve-load load|crash|abuse [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	fs := flag.NewFlagSet("serve-load "+mode, flag.ExitOnError)
	bin := fs.String("bin", "bin/mageguard", "the mageguard binary")
	out := fs.String("out", "", "the JSON file of figures (load, abuse)")
	sessions := fs.Int("sessions", 0, "sessions at once (load: 32, crash: 16)")
	steps := fs.Int("steps", 0, "steps a session (load, crash: 8; abuse: 72)")
	after := fs.Int("after", 40, "crash: answered steps before the kill")
	fs.Parse(os.Args[2:])
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if *sessions < 0 || *steps < 0 || *after < 1 {
		fmt.Fprintln(os.Stderr, "serve-load: --sessions, --steps and --after must be positive")
		os.Exit(2)
	}
	switch mode {
	case "load":
		def(sessions, 32)
		def(steps, 8)
		check.Main("serve-load", func(t *check.T) { serveLoad(t, *bin, *out, *sessions, *steps) })
	case "crash":
		def(sessions, 16)
		def(steps, 8)
		check.Main("serve-crash", func(t *check.T) { serveCrash(t, *bin, *sessions, *steps, *after) })
	case "abuse":
		def(steps, 72)
		check.Main("serve-abuse", func(t *check.T) { serveAbuse(t, *bin, *out, *steps) })
	default:
		fmt.Fprintf(os.Stderr, "serve-load: unknown mode %q (load, crash or abuse)\n", mode)
		os.Exit(2)
	}
}
