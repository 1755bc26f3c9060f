package serve

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mageguard/mageguard/internal/guardtest"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
)

// TestBatchesAcrossSessions: steps of sessions that arrive while a batch
// runs are gathered into the next one — one memory generation and one
// judge generation for all of them.
func TestBatchesAcrossSessions(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BatchSize, cfg.MaxWaitMS = 8, 50
	ts := newTestServer(t, cfg, true)
	ids := make([]string, 9)
	for i := range ids {
		ids[i] = ts.create(fmt.Sprintf("task %d", i))
	}
	var wg sync.WaitGroup
	codes := make([]int, len(ids))
	send := func(i int) {
		defer wg.Done()
		codes[i], _ = ts.do("POST", "/v1/sessions/"+ids[i]+"/assess", assessBody("read_file", `{}`, nil))
	}
	wg.Add(1)
	go send(0)
	<-ts.model.entered // the first batch is generating
	for i := 1; i < len(ids); i++ {
		wg.Add(1)
		go send(i)
	}
	guardtest.WaitFor(t, "8 queued steps", func() bool { return ts.srv.batcher.queued() == 8 })
	ts.open()
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("session %d: %d", i, c)
		}
	}
	if got := ts.model.calls(); !slices.Equal(got, []int{1, 1, 8, 8}) {
		t.Errorf("generation calls %v, want [1 1 8 8] (memory and judge of 1 step, then of 8)", got)
	}
	_, body := ts.do("GET", "/metrics", nil)
	for _, want := range []string{"mageguard_batch_steps_count 2\n", "mageguard_batch_steps_sum 9\n", `mageguard_steps_total{decision="allow"} 9`,
		`mageguard_step_phase_seconds_count{phase="memory"} 9` + "\n", `mageguard_step_phase_seconds_count{phase="judge"} 9` + "\n"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestFullQueueAnswers429(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BatchSize, cfg.QueueSize = 1, 2
	ts := newTestServer(t, cfg, true)
	ids := make([]string, 4)
	for i := range ids {
		ids[i] = ts.create("t")
	}
	var wg sync.WaitGroup
	codes := make([]int, 3)
	send := func(i int) {
		defer wg.Done()
		codes[i], _ = ts.do("POST", "/v1/sessions/"+ids[i]+"/assess", assessBody("read_file", `{}`, nil))
	}
	wg.Add(1)
	go send(0)
	<-ts.model.entered
	wg.Add(2)
	go send(1)
	go send(2)
	guardtest.WaitFor(t, "a full queue", func() bool { return ts.srv.batcher.queued() == 2 })
	code, body := ts.do("POST", "/v1/sessions/"+ids[3]+"/assess", assessBody("read_file", `{}`, nil))
	if code != 429 || decode[ErrorBody](t, body).Error.Code != "queue_full" {
		t.Fatalf("a step over the queue: %d %s", code, body)
	}
	ts.open()
	wg.Wait()
	if !slices.Equal(codes, []int{200, 200, 200}) {
		t.Errorf("queued steps answered %v", codes)
	}
	_, body = ts.do("GET", "/v1/sessions/"+ids[3], nil)
	if decode[SessionView](t, body).StepCount != 0 {
		t.Error("the refused step was stored")
	}
	_, m := ts.do("GET", "/metrics", nil)
	if !strings.Contains(string(m), `mageguard_steps_not_applied_total{reason="queue_full"} 1`) {
		t.Error("the 429 is not counted")
	}
}

// TestDeadline: a step still queued at its deadline, and one whose batch
// ends after it, are answered 503 and not applied.
func TestDeadline(t *testing.T) {
	cfg := DefaultConfig()
	cfg.BatchSize, cfg.DeadlineS = 1, 0.3
	ts := newTestServer(t, cfg, true)
	a, b := ts.create("a"), ts.create("b")
	var wg sync.WaitGroup
	var codeA int
	var bodyA []byte
	wg.Add(1)
	go func() {
		defer wg.Done()
		codeA, bodyA = ts.do("POST", "/v1/sessions/"+a+"/assess", assessBody("read_file", `{}`, nil))
	}()
	<-ts.model.entered // a's batch is generating, and waits
	code, body := ts.do("POST", "/v1/sessions/"+b+"/assess", assessBody("read_file", `{}`, nil))
	if code != 503 || decode[ErrorBody](t, body).Error.Code != "deadline_exceeded" {
		t.Errorf("the queued step: %d %s", code, body)
	}
	ts.open() // a's batch ends after a's deadline
	wg.Wait()
	if codeA != 503 || decode[ErrorBody](t, bodyA).Error.Code != "deadline_exceeded" {
		t.Errorf("the late step: %d %s", codeA, bodyA)
	}
	for _, id := range []string{a, b} {
		_, body := ts.do("GET", "/v1/sessions/"+id, nil)
		if v := decode[SessionView](t, body); v.StepCount != 0 || len(v.Steps) != 0 {
			t.Errorf("session %s: %d steps stored past the deadline", id, v.StepCount)
		}
	}
}

// TestThresholdBlocksOnTheScore: with serve.threshold the score decides,
// not the judge's sampled decision.
func TestThresholdBlocksOnTheScore(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Threshold = 0.25 // the fake judge approves reads with score 0.3
	ts := newTestServer(t, cfg, false)
	id := ts.create("t")
	_, body := ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("read_file", `{}`, nil))
	a := decode[AssessResponse](t, body)
	if a.Decision != DecisionBlock || math.Abs(a.Score-0.3) > 1e-6 {
		t.Errorf("%+v: want a block on score 0.3 >= 0.25", a)
	}
	_, body = ts.do("GET", "/v1/sessions/"+id, nil)
	if st := decode[SessionView](t, body).Steps[0]; st.Judge != "approve" || st.Decision != DecisionBlock {
		t.Errorf("stored: judge %s decision %s", st.Judge, st.Decision)
	}
}

func TestFormatViolationFallsBackToBlock(t *testing.T) {
	ts := newTestServer(t, DefaultConfig(), false)
	id := ts.create("t")
	_, body := ts.do("POST", "/v1/sessions/"+id+"/assess", assessBody("garbage", `{}`, nil))
	a := decode[AssessResponse](t, body)
	if a.Decision != DecisionBlock || a.Score != 1 || a.Rationale != "format violation: rejected by default" {
		t.Errorf("%+v", a)
	}
}

// failsTogether is a Stepper whose call fails when it holds more than one
// step, after counting what it did (as rollout.Guard.Step returns the
// stats of a call that failed): each step counts one call, 10 prompt
// tokens, one elided observation.
type failsTogether struct{}

func (failsTogether) Step(inputs []rollout.StepInput, _ generate.Sampling) ([]rollout.Turn, rollout.Stats, error) {
	n := len(inputs)
	stats := rollout.Stats{Calls: n, PromptTokens: 10 * n, ElidedObs: n}
	if n > 1 {
		return nil, stats, errors.New("the batch failed")
	}
	return make([]rollout.Turn, n), stats, nil
}

// TestRetriedHalvesCountEachStepOnce: when a batch's call fails as a whole
// and its halves run again, down to single steps, the batch's Stats count
// each step once, from the call that decided it (before, the failed
// calls' counts were added to their halves': 8 steps counted 4 times).
func TestRetriedHalvesCountEachStepOnce(t *testing.T) {
	ts := newTestServer(t, DefaultConfig(), false)
	ts.srv.SetGuard(failsTogether{})
	var jobs []*job
	for range 8 {
		jobs = append(jobs, &job{deadline: time.Now().Add(time.Minute)})
	}
	_, errs, stats := ts.srv.batcher.step(jobs, generate.Sampling{Greedy: true})
	for i, err := range errs {
		if err != nil {
			t.Errorf("step %d: %v", i, err)
		}
	}
	if want := (rollout.Stats{Calls: 8, PromptTokens: 80, ElidedObs: 8}); stats != want {
		t.Errorf("stats %+v, want %+v", stats, want)
	}
}

// byCost groups steps whose prompts are within 2× of the group's shortest,
// shortest group first, keeping the arrival order among equals.
func TestByCost(t *testing.T) {
	cases := []struct {
		tokens []int   // each job's prompt tokens, in arrival order
		want   [][]int // the groups, as indices into tokens
	}{
		{nil, nil},
		{[]int{500}, [][]int{{0}}},
		{[]int{500, 900, 1000}, [][]int{{0, 1, 2}}},            // 1000 = 2 × 500: together
		{[]int{500, 1001}, [][]int{{0}, {1}}},                  // just over 2×
		{[]int{2600, 450, 460, 2700}, [][]int{{1, 2}, {0, 3}}}, // the long ones after the short
		{[]int{100, 300, 700, 200}, [][]int{{0, 3}, {1}, {2}}}, // 300 > 2 × 100; 700 > 2 × 300
		{[]int{400, 400, 400}, [][]int{{0, 1, 2}}},             // equals keep their order
		{[]int{0, 0, 1}, [][]int{{0, 1}, {2}}},                 // an unprepared input costs 0
	}
	for _, c := range cases {
		jobs := make([]*job, len(c.tokens))
		index := map[*job]int{}
		for i := range jobs {
			jobs[i] = &job{}
			index[jobs[i]] = i
		}
		var got [][]int
		for _, g := range byCost(jobs, func(j *job) int { return c.tokens[index[j]] }) {
			var ids []int
			for _, j := range g {
				ids = append(ids, index[j])
			}
			got = append(got, ids)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("tokens %v: groups %v, want %v", c.tokens, got, c.want)
		}
	}
}
