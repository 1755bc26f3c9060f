package main

// Errors that name their fix: missing positional arguments, unknown flags,
// `--set KEY VALUE`, a training run's folder given as a checkpoint, a
// folder given as a trajectory file, and output folders a failed command
// created and left holding nothing of use.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/internal/lock"
	"github.com/mageguard/mageguard/model/checkpoint"
)

// positional is the Args check of a command whose positional arguments are
// names, the last ending in "..." when it takes one or more: a missing
// argument is named, as is an extra one.
func positional(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		many := strings.HasSuffix(names[len(names)-1], "...")
		if len(args) < len(names) {
			missing := strings.TrimSuffix(strings.Join(names[len(args):], " "), "...")
			return fmt.Errorf("%s: missing %s (usage: %s)", commandName(cmd), missing, cmd.UseLine())
		}
		if !many && len(args) > len(names) {
			return fmt.Errorf("%s: unexpected argument %q after %s (usage: %s)", commandName(cmd), args[len(names)], strings.Join(names, " "), cmd.UseLine())
		}
		return nil
	}
}

// commandName is cmd's path without the program's name: "data validate".
func commandName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// trajectoryFiles is positional(names...) for trajectory files: a folder
// among them is refused, naming the files in it.
func trajectoryFiles(names ...string) cobra.PositionalArgs {
	check := positional(names...)
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return err
		}
		for _, a := range args {
			if err := checkTrajectoryFile(commandName(cmd)+":", a); err != nil {
				return err
			}
		}
		return nil
	}
}

// unknownFlagRE matches pflag's "unknown flag: --name" and "unknown
// shorthand flag: 'x' in -x".
var unknownFlagRE = regexp.MustCompile(`^unknown flag: --([^\s=]+)`)

// flagError adds to pflag's unknown-flag error the closest flag cmd
// takes, and the usage line to every flag error.
func flagError(cmd *cobra.Command, err error) error {
	if m := unknownFlagRE.FindStringSubmatch(err.Error()); m != nil {
		var names []string
		add := func(f *pflag.Flag) { names = append(names, f.Name) }
		cmd.Flags().VisitAll(add)
		cmd.InheritedFlags().VisitAll(add)
		if c := config.Closest(names, m[1]); c != "" {
			return fmt.Errorf("%s: %w (did you mean --%s?)", commandName(cmd), err, c)
		}
	}
	return fmt.Errorf("%s: %w (usage: %s)", commandName(cmd), err, cmd.UseLine())
}

// checkSets refuses a --set without "=", which is `--set KEY VALUE` whose
// value cobra would take for an argument: it shows the KEY=VALUE form.
func checkSets(args []string) error {
	for _, kv := range global.sets {
		if strings.Contains(kv, "=") {
			continue
		}
		if len(args) > 0 {
			return fmt.Errorf("--set %s %s: write --set %s=%s (one argument, KEY=VALUE)", kv, args[0], kv, args[0])
		}
		return fmt.Errorf("--set %s: write --set %s=VALUE", kv, kv)
	}
	return nil
}

// withChecks wraps the Args check of every command under c with checkSets,
// which must run before it (a `--set KEY VALUE` leaves VALUE as an argument).
func withChecks(c *cobra.Command) {
	for _, sub := range c.Commands() {
		withChecks(sub)
	}
	if c.HasSubCommands() {
		return
	}
	check := c.Args
	c.Args = func(cmd *cobra.Command, args []string) error {
		if err := checkSets(args); err != nil {
			return err
		}
		if check == nil {
			return nil
		}
		return check(cmd, args)
	}
}

// checkRunDir refuses a --model that is a training run's folder (no
// config.json or adapter_config.json of its own, checkpoints inside), naming
// its checkpoints; anything else is left to the loader.
func checkRunDir(dir string) error {
	if dir == "" || isCheckpoint(dir) {
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var ckpts []string
	for _, e := range entries {
		if e.IsDir() && isCheckpoint(filepath.Join(dir, e.Name())) {
			ckpts = append(ckpts, e.Name())
		}
	}
	if len(ckpts) == 0 {
		return nil
	}
	sort.Slice(ckpts, func(i, j int) bool { return stepOf(ckpts[i]) < stepOf(ckpts[j]) })
	pick := ckpts[len(ckpts)-1]
	return fmt.Errorf("--model %s is a training run's folder, not a checkpoint: give one of its checkpoints (%s), e.g. --model %s",
		dir, strings.Join(ckpts, ", "), filepath.Join(dir, pick))
}

// isCheckpoint reports whether dir holds a model's or an adapter's config.
func isCheckpoint(dir string) bool {
	return fileExists(filepath.Join(dir, "config.json")) || fileExists(filepath.Join(dir, checkpoint.AdapterConfigFile))
}

// stepOf orders checkpoint names: checkpoint-N by N, checkpoint-best last.
func stepOf(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "checkpoint-"))
	if err != nil {
		return 1 << 30
	}
	return n
}

// checkTrajectoryFile refuses a folder given as a trajectory file, naming
// the trajectory files in it.
func checkTrajectoryFile(what, path string) error {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return nil // the reader reports a missing file
	}
	var files []string
	for _, pat := range []string{"*.jsonl", "*.parquet"} {
		m, _ := filepath.Glob(filepath.Join(path, pat))
		files = append(files, m...)
	}
	msg := fmt.Sprintf("%s %s is a directory: give a trajectory file (.jsonl or .parquet)", what, path)
	if len(files) > 0 {
		msg += ", e.g. " + strings.Join(files, " or ")
	}
	return errors.New(msg)
}

// outFolder notes whether a command's output folder existed before it ran,
// so that a failed run removes a folder it created that holds nothing of
// use (only its lock, its config.yaml, empty logs).
type outFolder struct {
	dir     string
	existed bool
}

func newOutFolder(dir string) outFolder {
	_, err := os.Stat(dir)
	return outFolder{dir: dir, existed: err == nil}
}

// cleanup removes the folder after a failed run (err != nil) when the run
// created it and nothing in it matches keep (glob patterns, e.g.
// "checkpoint-*", a checkpoint a --resume continues from) or is a
// non-empty file other than the lock and config.yaml.
func (o outFolder) cleanup(err error, keep ...string) {
	if err == nil || o.existed || o.dir == "" {
		return
	}
	for _, pat := range keep {
		if m, _ := filepath.Glob(filepath.Join(o.dir, pat)); len(m) > 0 {
			return
		}
	}
	entries, rerr := os.ReadDir(o.dir)
	if rerr != nil {
		return
	}
	for _, e := range entries {
		switch e.Name() {
		case lock.FileName, "config.yaml", "eval_config.yaml":
			continue
		}
		if info, ierr := e.Info(); ierr != nil || e.IsDir() || info.Size() > 0 {
			return
		}
	}
	os.RemoveAll(o.dir)
}

// count writes n with the noun's singular or plural: "1 session", "2 sessions".
func count[N int | int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
