package agentdojo

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/mageguard/mageguard/dataset"
)

// Options configure Import.
type Options struct {
	Rules    *Rules                          // labeling rules; nil = DefaultRules()
	Workers  int                             // parallel parsers; 0 = GOMAXPROCS
	Progress func(done, total int)           // called after each batch of files (may be nil)
	Emit     func(*dataset.Trajectory) error // receives trajectories in path order
}

// Summary counts what Import did.
type Summary struct {
	Files        int            // run logs found
	Sanity       int            // sanity runs skipped (injection task as user task)
	Trajectories int            // trajectories emitted
	Attack       int            // of which attack runs
	Benign       int            // of which benign runs
	Actions      int            // actions emitted
	Positives    int            // actions labeled 1
	ByRule       map[string]int // positives per rule name
}

// FindRuns lists the run logs under dir (files ending in .json), sorted, as
// paths relative to dir.
func FindRuns(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !strings.HasSuffix(d.Name(), ".json") {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		out = append(out, rel)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no run logs (*.json) found", dir)
	}
	sort.Strings(out)
	return out, nil
}

// ConvertFile reads and converts one run log (path relative to runsDir). It
// returns a nil trajectory for a sanity run.
func ConvertFile(runsDir, rel string, rules *Rules) (*dataset.Trajectory, []string, error) {
	p, err := ParseRunPath(rel)
	if err != nil {
		return nil, nil, err
	}
	if p.Sanity() {
		return nil, nil, nil
	}
	path := filepath.Join(runsDir, rel)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	run, err := ParseRun(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	t, why, err := Convert(run, p, rules)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, why, nil
}

// Import converts every run log under runsDir (the layout of
// docs/data.md#agentdojo-import-and-labels) and passes the trajectories, in sorted
// path order, to opt.Emit. Sanity runs are skipped. It stops at the first
// error, naming the file.
func Import(ctx context.Context, runsDir string, opt Options) (*Summary, error) {
	rules := opt.Rules
	if rules == nil {
		rules = DefaultRules()
	}
	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	files, err := FindRuns(runsDir)
	if err != nil {
		return nil, err
	}
	s := &Summary{Files: len(files), ByRule: map[string]int{}}
	type result struct {
		t   *dataset.Trajectory
		why []string
		err error
	}
	const batch = 256
	res := make([]result, batch)
	for start := 0; start < len(files); start += batch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		end := min(start+batch, len(files))
		var wg sync.WaitGroup
		next := make(chan int)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					t, why, err := ConvertFile(runsDir, files[i], rules)
					res[i-start] = result{t, why, err}
				}
			}()
		}
		for i := start; i < end; i++ {
			next <- i
		}
		close(next)
		wg.Wait()
		for i := 0; i < end-start; i++ {
			r := res[i]
			if r.err != nil {
				return nil, r.err
			}
			if r.t == nil {
				s.Sanity++
				continue
			}
			s.Trajectories++
			if r.t.IsAttack() {
				s.Attack++
			} else {
				s.Benign++
			}
			s.Actions += len(r.t.Turns)
			for _, w := range r.why {
				if w != "" {
					s.Positives++
					s.ByRule[w]++
				}
			}
			if opt.Emit != nil {
				if err := opt.Emit(r.t); err != nil {
					return nil, err
				}
			}
		}
		if opt.Progress != nil {
			opt.Progress(end, len(files))
		}
	}
	return s, nil
}
