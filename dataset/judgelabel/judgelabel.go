// Package judgelabel labels the actions of trajectories with an LLM judge,
// the way MAGE's training data was labeled (an LLM-as-judge, its
// disagreements verified by people). For each action the judge sees the
// user's task, the trajectory so far and the action (and the attack's
// injection task when the file names one) and answers by a function call:
// malicious or not, and why. The label is written with label_source
// "judge" and the reason as label_note.
//
// The judge is any Client (cmd/mageguard wires rollout/openai's
// OpenAI-compatible client). Verdicts are cached by the question's content
// (Cache), so a rerun, or a run resumed after an error, asks nothing
// twice; identical questions are asked once. At most Concurrency questions
// are in flight; a failed question (a request error or an answer that is
// not a verdict) is retried with a doubling backoff.
package judgelabel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/mageguard/mageguard/dataset"
)

// Client asks a chat model one question with a forced function tool and
// returns the arguments of its call (rollout/openai.Generator.CallTool).
type Client interface {
	CallTool(ctx context.Context, system, user, tool string, parameters json.RawMessage, maxTokens int) (json.RawMessage, error)
}

// Options configure Label.
type Options struct {
	Client        Client
	Cache         *Cache
	Model         string        // the judge model's name (part of the cache key)
	OnlyUnlabeled bool          // judge only actions whose label is a guess (label_source assumed or guard)
	Concurrency   int           // questions in flight at once (>= 1)
	Retries       int           // retries of a failed question (>= 0)
	Backoff       time.Duration // the wait before the first retry, doubled at each
	MaxTokens     int           // the judge's answer budget, tokens
	MaxTextChars  int           // each text of a question (prompt, arguments, observation) is cut to this many characters, marked
	// MaxHistoryChars bounds the earlier actions a question shows: the
	// most recent ones that fit, the elided ones counted.
	MaxHistoryChars int
	// Progress, when set, is called after each answer with the questions
	// answered and the questions to ask.
	Progress func(done, total int)
}

// Validate checks the settings (not Client and Cache, which Label needs).
func (o *Options) Validate() error {
	switch {
	case o.Concurrency < 1 || o.Concurrency > 1024:
		return fmt.Errorf("concurrency must be in [1, 1024], got %d", o.Concurrency)
	case o.Retries < 0 || o.Retries > 20:
		return fmt.Errorf("retries must be in [0, 20], got %d", o.Retries)
	case o.Backoff < 0:
		return fmt.Errorf("backoff must be >= 0, got %v", o.Backoff)
	case o.MaxTokens < 16 || o.MaxTokens > 1<<16:
		return fmt.Errorf("max tokens must be in [16, 65536], got %d", o.MaxTokens)
	case o.MaxTextChars < 100 || o.MaxTextChars > 1<<20:
		return fmt.Errorf("max text chars must be in [100, 1048576], got %d", o.MaxTextChars)
	case o.MaxHistoryChars < 0 || o.MaxHistoryChars > 1<<24:
		return fmt.Errorf("max history chars must be in [0, 16777216], got %d", o.MaxHistoryChars)
	}
	return nil
}

// Unlabeled reports whether an action's label is a guess rather than a
// label: label_source assumed (taken as benign) or guard (the guard's own
// decision).
func Unlabeled(tu *dataset.Turn) bool {
	return tu.LabelSource == dataset.LabelAssumed || tu.LabelSource == dataset.LabelGuard
}

// Disagreement is a judged action whose verdict differs from the label the
// file had, for a person to review.
type Disagreement struct {
	ID          string         `json:"id"`
	Turn        int            `json:"turn"`
	Action      dataset.Action `json:"action"`
	Label       int            `json:"label"`        // the file's label
	LabelSource string         `json:"label_source"` // where it came from ("" = not recorded)
	JudgeLabel  int            `json:"judge_label"`
	JudgeReason string         `json:"judge_reason"`
	Kept        string         `json:"kept"` // the label the output holds: "label" (a human's stands) or "judge"
}

// Summary counts what Label did.
type Summary struct {
	Judged        int // actions judged
	Questions     int // distinct questions
	Cached        int // of those, answered from the cache
	Asked         int // asked of the judge (requests, retries included)
	Changed       int // labels changed
	MarkedAttack  int // benign trajectories given injection_task_id "unknown" for a label 1
	Disagreements []Disagreement
}

// Label judges the actions of trs (all, or the unlabeled ones) and writes
// each verdict into its action: label, label_source judge, label_note the
// reason. A label given by a person (label_source human) is never
// replaced; a disagreement with it is reported like any other. A benign
// trajectory (no injection task) that gets a label 1 is marked an attack
// of unknown injection task and type, so that it validates. On an error
// no trajectory is changed; the verdicts received so far are in the cache.
func Label(ctx context.Context, trs []*dataset.Trajectory, o Options) (*Summary, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Client == nil || o.Cache == nil {
		return nil, errors.New("judgelabel: no client or no cache")
	}
	sum := &Summary{}
	var qs []Question
	var of []*dataset.Trajectory // the trajectory of each question
	for _, t := range trs {
		for i := range t.Turns {
			if o.OnlyUnlabeled && !Unlabeled(&t.Turns[i]) {
				continue
			}
			qs = append(qs, NewQuestion(t, i, o))
			of = append(of, t)
		}
	}
	sum.Judged = len(qs)
	var ask []Question
	seen := map[string]bool{}
	for _, q := range qs {
		if seen[q.Key] {
			continue
		}
		seen[q.Key] = true
		if _, ok := o.Cache.Get(q.Key); ok {
			sum.Cached++
		} else {
			ask = append(ask, q)
		}
	}
	sum.Questions = len(seen)
	asked, err := askAll(ctx, ask, o)
	sum.Asked = asked
	if err != nil {
		return sum, err
	}
	for k, q := range qs {
		v, _ := o.Cache.Get(q.Key)
		t := of[k]
		tu := &t.Turns[q.Turn]
		if tu.Label != v.Label() {
			d := Disagreement{ID: q.ID, Turn: q.Turn, Action: tu.Action, Label: tu.Label, LabelSource: tu.LabelSource,
				JudgeLabel: v.Label(), JudgeReason: v.Reason, Kept: "judge"}
			if tu.LabelSource == dataset.LabelHuman {
				d.Kept = "label"
			}
			sum.Disagreements = append(sum.Disagreements, d)
		}
		if tu.LabelSource == dataset.LabelHuman {
			continue
		}
		if tu.Label != v.Label() {
			sum.Changed++
		}
		tu.Label, tu.LabelSource, tu.LabelNote = v.Label(), dataset.LabelJudge, v.Reason
		if tu.Label == 1 && !t.IsAttack() {
			unknown := "unknown"
			t.InjectionTaskID, t.AttackType = &unknown, &unknown
			sum.MarkedAttack++
		}
	}
	return sum, nil
}

// askAll asks every question (at most o.Concurrency at once), putting each
// verdict in the cache as it arrives; the first failure stops the others.
// It returns the number of requests made.
func askAll(ctx context.Context, qs []Question, o Options) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		asked int
		done  int
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
		cancel()
	}
	work := make(chan Question)
	for range min(o.Concurrency, len(qs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range work {
				v, n, err := askOne(ctx, q, o)
				mu.Lock()
				asked += n
				mu.Unlock()
				if err == nil {
					err = o.Cache.Put(q.Key, v)
				}
				if err != nil {
					fail(fmt.Errorf("judging %s turn %d: %w", q.ID, q.Turn, err))
					continue
				}
				mu.Lock()
				done++
				if o.Progress != nil {
					o.Progress(done, len(qs))
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for _, q := range qs {
		select {
		case work <- q:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return asked, first
}

// askOne asks one question, retrying a failure after a doubling backoff.
// It returns the verdict and the number of requests made.
func askOne(ctx context.Context, q Question, o Options) (Verdict, int, error) {
	wait := o.Backoff
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return Verdict{}, attempt, err
		}
		raw, err := o.Client.CallTool(ctx, System, q.User, ToolName, ToolParameters, o.MaxTokens)
		var v Verdict
		if err == nil {
			v, err = ParseVerdict(raw)
		}
		if err == nil {
			return v, attempt + 1, nil
		}
		if attempt >= o.Retries || ctx.Err() != nil {
			if attempt > 0 {
				err = fmt.Errorf("%w (after %d retries)", err, attempt)
			}
			return Verdict{}, attempt + 1, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return Verdict{}, attempt + 1, ctx.Err()
		}
		wait *= 2
	}
}
