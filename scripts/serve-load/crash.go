package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mageguard/mageguard/internal/servetest"
	"github.com/mageguard/mageguard/scripts/internal/check"
)

// serveCrash (make serve-crash): sessions run their steps against a
// served checkpoint; once crashAfter steps (40) are
// answered the server is killed with SIGKILL in the middle of the load,
// restarted on the same --state, and every answered step must be stored
// with its answer, no session half-updated; the agents then retry their
// pending step (by index) and finish, and no step is stored twice.
func serveCrash(t *check.T, bin string, sessions, steps, crashAfter int) {
	ckpt := tinyCheckpoint(t)
	const token = "crash-test-token-0123456789"
	state := filepath.Join(t.TempDir(), "state")
	args := append([]string{"--state", state, "--model", ckpt, "--token-file", tokenFile(t, token),
		"--set", "serve.batch_size=16", "--set", "serve.max_wait_ms=20"}, loadSettings...)

	first := startProcess(t, bin, args...)
	c := newLoadClient(first.base, token)
	trajs := loadTurns(t, sessions, steps)
	ids := make([]string, sessions)
	for i := range ids {
		code, data, err := c.do("POST", "/v1/sessions", map[string]any{"user_prompt": trajs[i].UserPrompt})
		if err != nil || code != 201 {
			t.Fatalf("create: %d %s %v", code, data, err)
		}
		var r struct{ ID string }
		json.Unmarshal(data, &r)
		ids[i] = r.ID
	}

	// The agents run until the server goes; then they wait for it to be back.
	var mu sync.Mutex
	back := sync.NewCond(&mu)
	restarted := false
	gone := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for !restarted {
			back.Wait()
		}
		return true
	}
	got := make([]map[int]answered, sessions)  // each agent's own, read once it is done
	seen := make([]map[int]answered, sessions) // a copy, for the check right after the restart
	var seenMu sync.Mutex
	var nAnswered atomic.Int64
	errs := make([]error, sessions)
	var wg sync.WaitGroup
	for i := range ids {
		got[i], seen[i] = map[int]answered{}, map[int]answered{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = driveSession(c, ids[i], trajs[i], 0, got[i], gone, func(step int, a answered) {
				seenMu.Lock()
				seen[i][step] = a
				seenMu.Unlock()
				nAnswered.Add(1)
			})
		}()
	}
	servetest.PollUntil(t, 10*time.Minute, fmt.Sprintf("%d answered steps", crashAfter), func() bool { return nAnswered.Load() >= int64(crashAfter) })
	if err := first.cmd.Process.Kill(); err != nil { // SIGKILL: no shutdown, no flush
		t.Fatal(err)
	}
	answeredAtCrash := nAnswered.Load()
	<-first.exited

	second := startProcess(t, bin, args...)
	c.setBase(second.base)
	// Before the agents go on: every step answered before the kill is
	// stored with its answer, and every session is whole.
	seenMu.Lock()
	answeredBefore, storedBefore := 0, 0
	for i, id := range ids {
		v, err := checkStored(c, id, seen[i])
		if err != nil {
			t.Fatalf("right after the restart: %v", err)
		}
		answeredBefore += len(seen[i])
		storedBefore += v.StepCount
	}
	seenMu.Unlock()
	mu.Lock()
	restarted = true
	back.Broadcast()
	mu.Unlock()
	wg.Wait()
	defer func() { second.cmd.Process.Kill(); <-second.exited }()

	stored, retried := 0, 0
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("session %d: %v", i, errs[i])
		}
		v, err := checkStored(c, id, got[i])
		if err != nil {
			t.Fatal(err)
		}
		if v.StepCount != steps || len(got[i]) != steps {
			t.Fatalf("session %d: %d steps stored, %d answered, want %d", i, v.StepCount, len(got[i]), steps)
		}
		stored += v.StepCount
		for _, a := range got[i] {
			if a.retried {
				retried++
			}
		}
	}
	t.Logf("killed with SIGKILL after %d answered steps (%d sessions × %d steps); right after the restart all %d steps answered before the kill were stored with their answers (%d stored: %d committed whose answer the kill cut off), no session half-updated; the agents then retried %d pending steps by index and finished: %d steps stored, each once, each with the answer its agent got",
		answeredAtCrash, sessions, steps, answeredBefore, storedBefore, storedBefore-answeredBefore, retried, stored)
	if !strings.Contains(second.log.String(), fmt.Sprintf("%d sessions)", sessions)) {
		t.Errorf("the restarted server did not find the %d sessions:\n%s", sessions, second.log.String())
	}
}
