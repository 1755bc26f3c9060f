// Command docs-check runs, as written, the mageguard commands README.md and
// docs/*.md show in code blocks (`make docs-check`: after `make install`
// and `make demo`, from the repository's root, mageguard from the PATH).
// It runs those that can run on this machine and says why it skips the
// others: a placeholder (FILE, DIR, /path/to/…), a server (serve, mcp), a
// long job (a whole sweep, make learn's configs), or an input an earlier
// run the docs describe would have written. eval gets --limit N (2 by
// default) so the check takes minutes; an output under runs/ that a
// previous check left is removed before the command that writes it;
// everything else runs unchanged.
// Every command's syntax, the skipped ones' included, is checked by
// cmd/mageguard's TestDocCommandsParse.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mageguard/mageguard/internal/doccmd"
)

// cheapConfigs are the configurations whose runs take seconds to minutes
// on a CPU; plan and config read any.
var cheapConfigs = map[string]bool{
	"configs/tiny.yaml": true, "configs/model-tiny.yaml": true, "configs/synth-tiny.yaml": true, "configs/sweep-tiny.yaml": true,
}

// inputFlags name files or folders a command reads.
var inputFlags = map[string]bool{"--model": true, "--adapter": true, "--data": true, "--baseline": true, "--input": true,
	"--state": true, "--in": true}

var placeholderRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

func main() {
	logDir := flag.String("log", "runs/docs-check", "a log file per command run")
	limit := flag.Int("eval-limit", 2, "eval --limit for the eval commands")
	timeout := flag.Duration("timeout", 15*time.Minute, "the most one command may take")
	flag.Parse()
	if err := os.MkdirAll(*logDir, 0o755); err != nil {
		fail(err)
	}
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		fail(err)
	}
	sort.Strings(files)
	files = append([]string{"README.md"}, files...)
	before := map[string]bool{} // what runs/ held before the check (make demo's runs/tiny aside)
	if entries, err := os.ReadDir("runs"); err == nil {
		for _, e := range entries {
			if e.Name() != "tiny" && e.Name() != "docs-check" {
				before[filepath.Join("runs", e.Name())] = true
			}
		}
	}
	var pass, skip, failed int
	for _, f := range files {
		if filepath.Base(f) == "history.md" { // a record of past runs
			continue
		}
		cs, err := doccmd.Extract(f)
		if err != nil {
			fail(err)
		}
		for _, c := range cs {
			if c.Inline || c.Syntax {
				continue
			}
			if why := skipReason(c.Args); why != "" {
				skip++
				fmt.Printf("SKIP %s:%d: %s\n     (%s)\n", c.File, c.Line, c.Shell, why)
				continue
			}
			// An output a previous check left is removed first (model init
			// refuses a non-empty --out), once: a later command may read it.
			if out := value(c.Args, "--out"); strings.HasPrefix(filepath.Clean(out), "runs/") && before[filepath.Clean(out)] {
				os.RemoveAll(out)
				delete(before, filepath.Clean(out))
			}
			shell := c.Shell
			if c.Args[0] == "eval" && !has(c.Args, "--compare") && !has(c.Args, "--limit") {
				shell = strings.Replace(shell, "mageguard eval", fmt.Sprintf("mageguard eval --limit %d", *limit), 1)
			}
			log := filepath.Join(*logDir, fmt.Sprintf("%s-%d.log", strings.ReplaceAll(strings.TrimSuffix(c.File, ".md"), "/", "-"), c.Line))
			start := time.Now()
			err := runShell(shell, log, *timeout)
			secs := time.Since(start).Seconds()
			if err != nil {
				failed++
				fmt.Printf("FAIL %s:%d: %s\n     (%v; %.0f s; log %s)\n", c.File, c.Line, shell, err, secs, log)
				continue
			}
			pass++
			fmt.Printf("PASS %s:%d: %s (%.0f s)\n", c.File, c.Line, shell, secs)
		}
	}
	fmt.Printf("docs-check: %d passed, %d failed, %d skipped\n", pass, failed, skip)
	if failed > 0 {
		os.Exit(1)
	}
}

// skipReason says why a command cannot run here ("" when it can).
func skipReason(args []string) string {
	if len(args) == 0 {
		return "no command"
	}
	for i, a := range args {
		v := a
		if _, after, ok := strings.Cut(a, "="); ok && i > 0 && args[i-1] == "--set" {
			v = after
		}
		switch {
		case i > 0 && args[i-1] == "--prompt":
		case placeholderRE.MatchString(v) || strings.Contains(v, "/") && slices.ContainsFunc(strings.Split(v, "/"), placeholderRE.MatchString):
			return "a placeholder: " + v
		case strings.Contains(v, "$"), strings.Contains(v, "<"), strings.HasPrefix(v, "/path/to"), strings.HasPrefix(v, "/models/"),
			strings.HasPrefix(v, "/var/"), strings.HasPrefix(v, "/opt/"), strings.HasPrefix(v, "/home/"):
			return "a placeholder path: " + v
		}
	}
	switch {
	case args[0] == "serve" || args[0] == "mcp":
		return "a server: it runs until stopped"
	case has(args, "rollout.generator=openai"):
		return "needs a vLLM, SGLang or API server at rollout.endpoint"
	case args[0] == "sweep" && !has(args, "--plan") && !has(args, "--collect"):
		return "a whole sweep: a training run per point"
	case args[0] == "sweep" && has(args, "--collect") && !exists(value(args, "--out")):
		return "needs " + value(args, "--out") + ", the sweep's points"
	case args[0] == "model" && len(args) > 1 && args[1] == "bench":
		return "a benchmark"
	}
	if cfg := value(args, "--config"); cfg != "" && !cheapConfigs[cfg] && args[0] != "plan" && args[0] != "config" && !has(args, "--plan") {
		return "runs " + cfg + ", sized for a GPU or for make learn"
	}
	for i := 1; i < len(args); i++ {
		if inputFlags[args[i-1]] && !exists(args[i]) {
			return "needs " + args[i] + ", which an earlier run the docs describe writes"
		}
	}
	if args[0] == "data" && len(args) > 2 && (args[1] == "validate" || args[1] == "stats" || args[1] == "split") {
		for _, a := range args[2:] {
			if strings.HasSuffix(a, ".jsonl") || strings.HasSuffix(a, ".parquet") {
				if !exists(a) {
					return "needs " + a + ", which an earlier run the docs describe writes"
				}
				break // the first file is the input; a later one may be an output
			}
		}
	}
	if args[0] == "eval" && has(args, "--compare") {
		for _, a := range args[1:] {
			if !strings.HasPrefix(a, "-") && !exists(a) {
				return "needs " + a
			}
		}
	}
	return ""
}

func has(args []string, flag string) bool {
	for _, a := range args {
		if a == flag {
			return true
		}
	}
	return false
}

func value(args []string, flag string) string {
	for i := 1; i < len(args); i++ {
		if args[i-1] == flag {
			return args[i]
		}
	}
	return ""
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// runShell runs a shell line with bash, its output into log.
func runShell(line, log string, timeout time.Duration) error {
	f, err := os.Create(log)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	cmd.Stdout, cmd.Stderr = f, f
	return cmd.Run()
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "docs-check:", err)
	os.Exit(1)
}
