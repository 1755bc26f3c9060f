package train

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/mageguard/mageguard/internal/lock"
)

// TestARunIntoALockedOutIsRefusedAtOnce: while another process holds --out,
// a run is refused with the holder's PID before it reads its data (the
// data path here does not exist) and writes nothing.
func TestARunIntoALockedOutIsRefusedAtOnce(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	held, err := lock.Acquire(out)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	for _, resume := range []bool{false, true} {
		o := microOptions(t, out)
		o.Train.Data = "testdata/no-such-data.jsonl"
		o.Resume = resume
		o.ResolvedConfig = []byte("x: 1\n")
		_, err := Run(context.Background(), o)
		var he *lock.HeldError
		if !errors.As(err, &he) || he.PID != os.Getpid() {
			t.Fatalf("resume %v: error %v, want the lock's holder named", resume, err)
		}
		entries, _ := os.ReadDir(out)
		if len(entries) != 1 || entries[0].Name() != lock.FileName {
			t.Fatalf("resume %v: the refused run left %v", resume, entries)
		}
	}
}

// concurrentStart is a progress writer that, when the run it watches
// reports its first step, starts a second run into the same folder — the
// reproduction of two `train` commands (or a `--resume` while a run is
// saving) — and records what that run returned.
type concurrentStart struct {
	mu     sync.Mutex
	second Options
	err    error
	done   bool
}

func (c *concurrentStart) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done && bytes.HasPrefix(p, []byte("step 1/")) {
		c.done = true
		_, c.err = Run(context.Background(), c.second)
	}
	return len(p), nil
}

// TestTwoRunsIntoOneOutDoNotInterleave: a second run (fresh or --resume)
// started while a run trains is refused with exit status 1's error and
// the first run's metrics.jsonl holds its own steps, once each, in order.
func TestTwoRunsIntoOneOutDoNotInterleave(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a model")
	}
	for _, resume := range []bool{false, true} {
		o := microOptions(t, filepath.Join(t.TempDir(), "out"))
		o.Train.Steps, o.Train.SaveEvery = 3, 1
		o.Train.LogRollouts = false
		second := o
		second.Resume = resume
		cs := &concurrentStart{second: second}
		o.Progress = cs
		res, err := Run(context.Background(), o)
		if err != nil || res.Steps != 3 {
			t.Fatalf("first run: %+v, %v", res, err)
		}
		var he *lock.HeldError
		if !cs.done || !errors.As(cs.err, &he) {
			t.Fatalf("resume %v: the second run returned %v, want a *lock.HeldError", resume, cs.err)
		}
		ms := readJSONL[Metrics](t, filepath.Join(o.Out, "metrics.jsonl"))
		var steps []int
		for _, m := range ms {
			steps = append(steps, m.Step)
		}
		if len(steps) != 3 || steps[0] != 1 || steps[1] != 2 || steps[2] != 3 {
			t.Fatalf("resume %v: metrics.jsonl steps %v, want [1 2 3]", resume, steps)
		}
	}
}

// TestStartRemovesWhatAKilledRunLeft: the temporary files and folders of a
// run killed mid-write (the "..checkpoint-N.tmp.tmp-*" folders
// among them) are removed when the next run prepares the folder, and a
// checkpoint moved aside whose replacement never arrived is put back.
func TestStartRemovesWhatAKilledRunLeft(t *testing.T) {
	out := t.TempDir()
	mk := func(name string, dir bool) {
		p := filepath.Join(out, name)
		if dir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			p = filepath.Join(p, "model.safetensors")
		}
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stale := []string{"..checkpoint-4.tmp.tmp-1234", "..checkpoint-best.tmp.tmp-77", ".checkpoint-4.tmp", ".checkpoint-best.tmp"}
	for _, name := range stale {
		mk(name, true)
	}
	mk(".metrics.jsonl.tmp-98765", false)
	mk(".config.yaml.tmp-5", false)
	mk("checkpoint-2.old", true) // aside, and checkpoint-2 is missing: put back
	mk("checkpoint-3", true)
	mk("checkpoint-3.old", true) // aside of a checkpoint that was replaced: removed
	mk("metrics.jsonl", false)
	var log strings.Builder
	if err := prepareOut(out, true, &log); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(out)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	sort.Strings(left)
	want := []string{"checkpoint-2", "checkpoint-3", "metrics.jsonl"}
	if strings.Join(left, " ") != strings.Join(want, " ") {
		t.Fatalf("left %v, want %v (log: %s)", left, want, log.String())
	}
	if data, err := os.ReadFile(filepath.Join(out, "checkpoint-2", "model.safetensors")); err != nil || string(data) != "partial" {
		t.Fatalf("checkpoint-2 not put back: %q, %v", data, err)
	}
	if !strings.Contains(log.String(), "removed 7 leftovers") || !strings.Contains(log.String(), "put back checkpoint-2") {
		t.Fatalf("log %q does not say what was cleaned", log.String())
	}
}
