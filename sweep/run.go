package sweep

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mageguard/mageguard/internal/atomicfile"
	"github.com/mageguard/mageguard/internal/lock"
)

// DoneFile marks a finished point: the sweep writes it into the point's
// folder after the runner returned without error, so a point is either
// finished (DONE present) or will be run again.
const DoneFile = "DONE"

// Runner trains and evaluates one point into dir (which exists), writing at
// least dir/report.json (eval.WriteReport). The point's configuration is
// the schedule's base config with p.Sets applied. dir may hold what an earlier,
// interrupted run of the same point left there. Returning an error stops
// the sweep; the point is not marked done.
type Runner func(ctx context.Context, p Point, dir string) error

// doneRecord is the content of DONE.
type doneRecord struct {
	Index    int      `json:"index"`
	Name     string   `json:"name"`
	Sets     []string `json:"sets"`
	Config   string   `json:"config_sha256,omitempty"` // Point.ConfigHash of the run
	Seconds  float64  `json:"seconds"`                 // how long the runner took
	Finished string   `json:"finished"`                // RFC 3339 time
}

// Options say how Run and RunPoint run the points.
type Options struct {
	// Runner trains and evaluates one point.
	Runner Runner
	// Progress receives a line per point and an ETA (nil: nothing).
	Progress io.Writer
	// Now is the clock that times the points (nil: time.Now).
	Now func() time.Time
}

func (o *Options) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// Done reports whether the point folder dir holds a finished point.
func Done(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, DoneFile))
	return err == nil
}

// finished reports whether pt is finished in outDir. A DONE written for
// other overrides (the grid's keys changed but kept their short names) or,
// when pt.ConfigHash is set, for another resolved configuration (the base
// config or the global overrides changed) is an error rather than a result
// silently reused.
func finished(outDir string, pt Point) (bool, error) {
	dir := filepath.Join(outDir, pt.Name)
	data, err := os.ReadFile(filepath.Join(dir, DoneFile))
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sweep: point %d: %w", pt.Index, err)
	}
	var rec doneRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return false, fmt.Errorf("sweep: point %d: %s: %w", pt.Index, filepath.Join(dir, DoneFile), err)
	}
	if fmt.Sprint(rec.Sets) != fmt.Sprint(pt.Sets) {
		return false, fmt.Errorf("sweep: point %d: %s holds a run with overrides %v, not %v: use another output folder",
			pt.Index, dir, rec.Sets, pt.Sets)
	}
	if pt.ConfigHash != "" && rec.Config != pt.ConfigHash {
		was := "no configuration hash (an older mageguard wrote it)"
		if rec.Config != "" {
			was = "configuration sha256 " + short(rec.Config)
		}
		return false, fmt.Errorf("sweep: point %d: %s was run with another configuration than this one "+
			"(its %s records %s, now %s: the base config, the global --set overrides or sweep.eval_data changed): "+
			"use another output folder, or delete the point's folder to run it again",
			pt.Index, dir, DoneFile, was, short(pt.ConfigHash))
	}
	return true, nil
}

// short abbreviates a hash for messages.
func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

// readDone returns the runner's recorded duration of a finished point (0 if unknown).
func readDone(dir string) time.Duration {
	data, err := os.ReadFile(filepath.Join(dir, DoneFile))
	if err != nil {
		return 0
	}
	var rec doneRecord
	if json.Unmarshal(data, &rec) != nil {
		return 0
	}
	return time.Duration(rec.Seconds * float64(time.Second))
}

// progress tracks finished points and estimates the time left from the
// mean duration of the points finished so far (this run's and earlier ones').
type progress struct {
	w          io.Writer
	total      int
	finished   int
	timed      int
	timedTotal time.Duration
}

func (pr *progress) printf(format string, args ...any) {
	if pr.w != nil {
		fmt.Fprintf(pr.w, format, args...)
	}
}

func (pr *progress) add(d time.Duration) {
	pr.finished++
	if d > 0 {
		pr.timed++
		pr.timedTotal += d
	}
}

func (pr *progress) eta() string {
	left := pr.total - pr.finished
	if left == 0 {
		return "all finished"
	}
	if pr.timed == 0 {
		return fmt.Sprintf("%d left", left)
	}
	mean := pr.timedTotal / time.Duration(pr.timed)
	return fmt.Sprintf("%d left, ETA %s", left, (mean * time.Duration(left)).Round(time.Second))
}

// Run runs every point of sched not yet finished, in order, into
// outDir/<point name>/ with o.Runner, printing progress and an ETA to
// o.Progress; then it collects the summary (see Collect). A point whose runner
// fails stops the sweep with an error naming the point; running the sweep
// again resumes from there.
//
// The sweep holds outDir's lock (package internal/lock) from start to end,
// and each point's lock while it runs: a second sweep into outDir is
// refused at once, naming the holder's PID. Temporary files a killed sweep
// left in outDir are removed once the lock is held.
func Run(ctx context.Context, sched *Schedule, outDir string, o Options) error {
	lk, err := lock.Acquire(outDir)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	defer lk.Release()
	pr := &progress{w: o.Progress, total: len(sched.Points)}
	if removed, err := atomicfile.RemoveStale(outDir); err != nil {
		return fmt.Errorf("sweep: %w", err)
	} else if len(removed) > 0 {
		pr.printf("sweep: removed %d leftovers of a killed sweep from %s: %s\n", len(removed), outDir, strings.Join(removed, ", "))
	}
	done := make([]bool, len(sched.Points))
	for i, pt := range sched.Points {
		ok, err := finished(outDir, pt)
		if err != nil {
			return err
		}
		if done[i] = ok; ok {
			pr.add(readDone(filepath.Join(outDir, pt.Name)))
		}
	}
	pr.printf("sweep: %d points over %s, %d already finished, %d to run\n",
		pr.total, strings.Join(sched.Keys, " × "), pr.finished, pr.total-pr.finished)
	for i, pt := range sched.Points {
		if done[i] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("sweep: stopped before point %d (%s): %w", pt.Index, pt.Name, err)
		}
		d, err := runOne(ctx, sched, outDir, pt, &o, pr)
		if err != nil {
			return err
		}
		pr.add(d)
		pr.printf("sweep: point %d (of 0..%d) %s: done in %s; %s\n", pt.Index, pr.total-1, pt.Name, d.Round(time.Second), pr.eta())
	}
	sum, err := Collect(outDir, sched)
	if err != nil {
		return err
	}
	pr.printf("sweep: wrote %s, %s and heatmaps (%d points)\n",
		filepath.Join(outDir, SummaryCSV), filepath.Join(outDir, SummaryMarkdown), len(sum.Reports))
	return nil
}

// RunPoint runs point n of sched into outDir/<point name>/ unless it is
// already finished (so a scheduler may retry it safely). It backs
// `mageguard sweep --point N`. It holds the point's lock, not outDir's, so
// that a cluster may run several points of one sweep at once.
func RunPoint(ctx context.Context, sched *Schedule, outDir string, n int, o Options) error {
	pt, err := sched.Point(n)
	if err != nil {
		return err
	}
	pr := &progress{w: o.Progress, total: len(sched.Points)}
	ok, err := finished(outDir, pt)
	if err != nil {
		return err
	}
	if ok {
		pr.printf("sweep: point %d (of 0..%d) %s: already finished\n", pt.Index, pr.total-1, pt.Name)
		return nil
	}
	d, err := runOne(ctx, sched, outDir, pt, &o, pr)
	if err != nil {
		return err
	}
	pr.printf("sweep: point %d (of 0..%d) %s: done in %s\n", pt.Index, pr.total-1, pt.Name, d.Round(time.Second))
	return nil
}

// PointLockFile is the lock file, inside a point's folder, that a sweep
// holds while it runs the point (training, eval and DONE); training holds
// the folder's own lock (lock.FileName) besides.
const PointLockFile = ".sweep-point.lock"

// runOne runs one point and marks it done; it returns the runner's duration.
func runOne(ctx context.Context, sched *Schedule, outDir string, pt Point, o *Options, pr *progress) (time.Duration, error) {
	dir := filepath.Join(outDir, pt.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("sweep: point %d (%s): %w", pt.Index, pt.Name, err)
	}
	lk, err := lock.AcquireFile(filepath.Join(dir, PointLockFile))
	if err != nil {
		return 0, fmt.Errorf("sweep: point %d (%s): %w", pt.Index, pt.Name, err)
	}
	defer lk.Release()
	// Another process may have finished the point while this one waited for it.
	if ok, err := finished(outDir, pt); err != nil || ok {
		return 0, err
	}
	pr.printf("sweep: point %d (of 0..%d) %s: running (%s)\n", pt.Index, pr.total-1, pt.Name, sched.Label(pt))
	start := o.now()
	if err := o.Runner(ctx, pt, dir); err != nil {
		return 0, fmt.Errorf("sweep: point %d (%s): %w", pt.Index, pt.Name, err)
	}
	d := o.now().Sub(start)
	rec := doneRecord{Index: pt.Index, Name: pt.Name, Sets: pt.Sets, Config: pt.ConfigHash, Seconds: d.Seconds(), Finished: o.now().UTC().Format(time.RFC3339)}
	data, _ := json.MarshalIndent(rec, "", "  ")
	if err := atomicfile.WriteFileMode(filepath.Join(dir, DoneFile), append(data, '\n'), 0o644); err != nil {
		return 0, fmt.Errorf("sweep: point %d (%s): mark done: %w", pt.Index, pt.Name, err)
	}
	return d, nil
}
