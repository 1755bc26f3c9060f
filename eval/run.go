package eval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/seed"
	"github.com/mageguard/mageguard/rollout"
	"github.com/mageguard/mageguard/rollout/generate"
)

// DefaultChunk is the number of trajectories per guard run when
// Options.Chunk is 0.
const DefaultChunk = 32

// Options say how Evaluate runs the guard. Config.Options builds them from
// the `eval` and `rollout` sections.
type Options struct {
	// Sampling draws the memory and judge calls; Greedy for a plain eval.
	Sampling generate.Sampling
	// Votes > 1 makes K = Votes judge calls per turn, each drawn with
	// VoteSampling, whose majority is the decision (consensus baseline).
	Votes        int
	VoteSampling generate.Sampling
	// Limit evaluates only the first Limit trajectories that have an action
	// (0 = all).
	Limit int
	// Chunk is the number of trajectories per Guard.Run call: the calls of
	// all of them at a turn are batched into one generation (0 = DefaultChunk).
	// Progress is reported and cancellation checked between chunks, and with
	// a Meter also after every turn and generation call inside a chunk.
	Chunk int
	// Meter, when set, is the Meter the guard generates through; Evaluate
	// watches it to report progress after every turn of a chunk and to stop
	// after the current generation call when ctx is cancelled.
	Meter *Meter
	// MemoryCalls says the guard makes a memory call every turn (variant
	// mage) besides the judge call(s): with a Meter, Evaluate counts
	// 1 + Votes generated rows per trajectory and turn to know when a turn ends.
	MemoryCalls bool
	// Emit, when set, receives each chunk's decisions as soon as they are
	// made, in order (e.g. to stream decisions.jsonl). An error stops the eval.
	Emit func([]Decision) error
}

// Evaluate runs the guard unabridged over every turn of every trajectory
// that has at least one action, one chain each, and returns one Decision per
// trajectory × turn, trajectories in input order and turns in order.
// Trajectories without an action have nothing to guard: they are skipped
// and counted in nSkipped (only those read before Limit was reached).
//
// The trajectories run in chunks of opts.Chunk; progress, throughput and an
// ETA go to progress (may be nil) after each chunk (and, with opts.Meter,
// after each turn inside a chunk), and ctx is checked before each chunk
// (and, with opts.Meter, after each generation call): a cancelled eval
// returns the decisions of the chunks finished so far with the context's
// error. Greedy decisions do not depend on the chunk size; sampled calls
// (votes, or a non-greedy Sampling) are reproducible for the same seed and
// chunk size.
func Evaluate(ctx context.Context, guard *rollout.Guard, trajs []*dataset.Trajectory, opts Options, progress io.Writer) (decisions []Decision, nSkipped int, err error) {
	chunk := opts.Chunk
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	var episodes []*rollout.Episode
	totalTurns := 0
	for _, tr := range trajs {
		if opts.Limit > 0 && len(episodes) == opts.Limit {
			break
		}
		if len(tr.Turns) == 0 {
			nSkipped++
			continue
		}
		episodes = append(episodes, &rollout.Episode{Traj: tr, Start: 0, End: len(tr.Turns)})
		totalTurns += len(tr.Turns)
	}
	if len(episodes) == 0 {
		// An all-null report with exit status 0 would pass for a result.
		return nil, nSkipped, fmt.Errorf("eval: nothing to evaluate: %d trajectories, none with an action", len(trajs))
	}
	run := rollout.RunOptions{Chains: 1, Sampling: opts.Sampling}
	if opts.Votes > 1 {
		run.Votes, run.VoteSampling = opts.Votes, opts.VoteSampling
	}
	pr := evalProgress{w: progress, start: time.Now(), trajs: len(episodes), turns: totalTurns,
		chunks: (len(episodes) + chunk - 1) / chunk}
	pr.printf("eval: %d trajectories (%d turns), %d skipped without an action, %d per chunk\n",
		len(episodes), totalTurns, nSkipped, chunk)
	var cur *chunkTurns // the chunk running, for the Meter's calls
	if opts.Meter != nil {
		callsPerTurn := max(opts.Votes, 1)
		if opts.MemoryCalls {
			callsPerTurn++
		}
		opts.Meter.watch(func(rows, promptTokens, newTokens int) error {
			pr.live.PromptTokens += promptTokens
			pr.live.NewTokens += newTokens
			if cur != nil {
				cur.rows += rows
				// Report every turn of the chunk that has ended but the last
				// (the chunk's own line follows it).
				for ; cur.next < len(cur.ends)-1 && cur.rows >= cur.ends[cur.next].turns*callsPerTurn; cur.next++ {
					e := cur.ends[cur.next]
					pr.line(pr.doneTrajs+e.trajs, pr.doneTurns+e.turns,
						fmt.Sprintf(" (chunk %d/%d, turn %d/%d)", cur.index+1, pr.chunks, cur.next+1, len(cur.ends)))
				}
			}
			return ctx.Err()
		})
		defer opts.Meter.watch(nil)
	}

	for lo := 0; lo < len(episodes); lo += chunk {
		hi := min(lo+chunk, len(episodes))
		if err := ctx.Err(); err != nil {
			return decisions, nSkipped, fmt.Errorf("eval: stopped after %d of %d trajectories: %w", lo, len(episodes), err)
		}
		cur = newChunkTurns(lo/chunk, episodes[lo:hi])
		// A seed per chunk, so that chunks do not repeat each other's draws.
		run.Sampling.Seed = chunkSeed(opts.Sampling.Seed, lo)
		run.VoteSampling.Seed = chunkSeed(opts.VoteSampling.Seed, lo)
		chains, stats, err := guard.Run(episodes[lo:hi], run)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil && errors.Is(err, cerr) { // the Meter stopped it
				return decisions, nSkipped, fmt.Errorf("eval: stopped after %d of %d trajectories: %w", lo, len(episodes), cerr)
			}
			return decisions, nSkipped, fmt.Errorf("eval: trajectories %d..%d (from %q): %w", lo, hi-1, episodes[lo].Traj.ID, err)
		}
		if len(chains) != hi-lo {
			return decisions, nSkipped, fmt.Errorf("eval: the guard returned %d chains for %d trajectories", len(chains), hi-lo)
		}
		var ds []Decision
		for _, ch := range chains {
			tr := ch.Episode.Traj
			if len(ch.Turns) != len(tr.Turns) {
				return decisions, nSkipped, fmt.Errorf("eval: trajectory %q: the guard ran %d of its %d turns", tr.ID, len(ch.Turns), len(tr.Turns))
			}
			for i := range ch.Turns {
				ds = append(ds, NewDecision(tr, &ch.Turns[i]))
			}
		}
		if opts.Emit != nil {
			if err := opts.Emit(ds); err != nil {
				return decisions, nSkipped, err
			}
		}
		decisions = append(decisions, ds...)
		pr.add(hi-lo, len(ds), stats)
	}
	pr.done()
	return decisions, nSkipped, nil
}

// NewDecision is the decisions.jsonl record of one turn of the guard's run
// over trajectory tr.
func NewDecision(tr *dataset.Trajectory, t *rollout.Turn) Decision {
	d := Decision{
		TrajectoryID: tr.ID,
		Suite:        tr.Suite,
		AttackType:   tr.AttackType,
		Attack:       tr.IsAttack(),
		Utility:      tr.Utility,
		Turn:         t.Index,
		Label:        t.Label,
		Decision:     t.Decision,
		JudgeParsed:  t.Judge.Parsed,
		MemoryChars:  t.MemoryChars(),
		Memory:       t.MemoryOut,
		Rationale:    t.Rationale,
		GuardTokens:  t.GuardTokens(),
		PrefixTokens: t.PrefixTokens(),
	}
	score := t.Score
	d.Score = &score
	if !d.Attack { // decisions.jsonl: null for every benign run, whatever the data says
		d.AttackType = nil
	}
	if t.Memory != nil {
		parsed := t.Memory.Parsed
		d.MemoryParsed = &parsed
	}
	if len(t.Votes) > 0 {
		d.Votes = t.VoteDecisions()
		d.VoteTokens = t.VoteTokens()
		for i := range t.Votes {
			d.JudgeParsed = d.JudgeParsed && t.Votes[i].Parsed
		}
	}
	return d
}

// chunkSeed derives the seed of the chunk starting at trajectory lo
// (seed.Mix; chunk 0 keeps the seed itself).
func chunkSeed(s uint64, lo int) uint64 {
	if lo == 0 {
		return s
	}
	return seed.Mix(s, uint64(lo))
}

// chunkTurns says what the turns of one chunk complete: by the end of its
// turn t (from 0), ends[t].turns trajectory-turns (the trajectories still
// running at each turn up to t, summed; each is one row of every generation
// call of its turn) and ends[t].trajs whole trajectories.
type chunkTurns struct {
	index int // the chunk's number, from 0
	ends  []struct{ turns, trajs int }
	rows  int // rows generated so far in the chunk
	next  int // the first turn not reported yet
}

func newChunkTurns(index int, eps []*rollout.Episode) *chunkTurns {
	c := &chunkTurns{index: index}
	maxT := 0
	for _, e := range eps {
		maxT = max(maxT, e.End-e.Start)
	}
	turns, trajs := 0, 0
	for t := 0; t < maxT; t++ {
		for _, e := range eps {
			if n := e.End - e.Start; t < n {
				turns++
				if t == n-1 {
					trajs++
				}
			}
		}
		c.ends = append(c.ends, struct{ turns, trajs int }{turns, trajs})
	}
	return c
}

// evalProgress prints what Evaluate has done: trajectories and turns,
// guard tokens per second, and an ETA from the turns left.
type evalProgress struct {
	w            io.Writer
	start        time.Time
	trajs, turns int // totals
	chunks       int
	doneTrajs    int           // in finished chunks
	doneTurns    int           // in finished chunks
	stats        rollout.Stats // summed over finished chunks
	live         rollout.Stats // tokens the Meter saw in the running chunk
}

func (p *evalProgress) printf(format string, args ...any) {
	if p.w != nil {
		fmt.Fprintf(p.w, format, args...)
	}
}

func (p *evalProgress) add(trajs, turns int, s rollout.Stats) {
	p.doneTrajs += trajs
	p.doneTurns += turns
	p.stats.Add(s)
	p.live = rollout.Stats{}
	p.line(p.doneTrajs, p.doneTurns, "")
}

// line prints one progress line: trajs trajectories and turns turns done.
func (p *evalProgress) line(trajs, turns int, where string) {
	el := time.Since(p.start)
	sec := max(el.Seconds(), 1e-9)
	eta := "done"
	if turns < p.turns {
		eta = "ETA ?"
		if turns > 0 {
			eta = "ETA " + (time.Duration(float64(el) * float64(p.turns-turns) / float64(turns))).Round(time.Second).String()
		}
	}
	prompt, generated := p.stats.PromptTokens+p.live.PromptTokens, p.stats.NewTokens+p.live.NewTokens
	p.printf("eval: %d/%d trajectories, %d/%d turns, %.0f guard tokens/s (%.1f generated/s), %s elapsed, %s%s\n",
		trajs, p.trajs, turns, p.turns, float64(prompt+generated)/sec, float64(generated)/sec,
		el.Round(time.Second), eta, where)
}

func (p *evalProgress) done() {
	p.printf("eval: finished in %s: %s\n", time.Since(p.start).Round(time.Millisecond), p.stats)
}

// Files EvaluateInto writes into its directory, besides WriteReport's.
const DecisionsJSONL = "decisions.jsonl"

// EvaluateInto runs Evaluate and writes the eval's files into dir (created
// if needed): decisions.jsonl, streamed as the chunks finish and renamed
// into place at the end, then report.json, report.md and the plots
// (WriteReport). An older report.json in dir is removed before the new
// decisions are published, so a report.json always describes the
// decisions.jsonl beside it; a failed or cancelled eval leaves no new file.
// opts.Emit, when set, still receives every chunk.
func EvaluateInto(ctx context.Context, dir string, guard *rollout.Guard, trajs []*dataset.Trajectory, opts Options, ropts ReportOptions, progress io.Writer) (Report, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Report{}, fmt.Errorf("eval: %w", err)
	}
	dw, err := CreateDecisions(filepath.Join(dir, DecisionsJSONL))
	if err != nil {
		return Report{}, err
	}
	emit := opts.Emit
	opts.Emit = func(ds []Decision) error {
		for _, d := range ds {
			if err := dw.Write(d); err != nil {
				return err
			}
		}
		if emit != nil {
			return emit(ds)
		}
		return nil
	}
	ds, nSkipped, err := Evaluate(ctx, guard, trajs, opts, progress)
	if err != nil {
		dw.Abort()
		return Report{}, err
	}
	if err := os.Remove(filepath.Join(dir, ReportJSON)); err != nil && !os.IsNotExist(err) {
		dw.Abort()
		return Report{}, fmt.Errorf("eval: remove the old report: %w", err)
	}
	if err := dw.Close(); err != nil {
		return Report{}, err
	}
	report := Compute(ds, nSkipped)
	if report.Synth, err = SynthFigures(trajs, ds); err != nil {
		return Report{}, err
	}
	if err := WriteReport(dir, ds, report, ropts); err != nil {
		return Report{}, err
	}
	return report, nil
}
