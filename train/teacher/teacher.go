// Package teacher gives a supervised warm start (mageguard sft) its
// targets: what the guard should write at each turn of a trajectory — the
// memory after the memory call, and the judge's decision with its
// rationale. Every teacher lives here: the synthetic world's memory
// managers with the world's judge rule (Synth: perfect, myopic or leaky), and
// targets read from a file (File: e.g. a stronger model's guard outputs).
// It reads trajectories (dataset, dataset/synth) and nothing above them.
package teacher

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/mageguard/mageguard/dataset"
)

// Teacher gives a supervised warm start (SFT) its targets: what the guard
// should write at each turn of a trajectory.
type Teacher interface {
	// Targets returns one Target per turn of the window [start, end) of tr,
	// in order. It returns an error wrapping ErrNotTaught for a trajectory
	// the teacher has nothing for (SFT leaves it out).
	Targets(tr *dataset.Trajectory, start, end int) ([]Target, error)
	// String names the teacher in logs.
	String() string
}

// A Corrector is a Teacher that can also say what a model should have
// written from the memories it wrote itself (sft.own_memories): the expert
// of DAgger-style training. A model trained only on the teacher's memories
// reads its own at eval, and its mistakes compound turn after turn.
type Corrector interface {
	Teacher
	// Next returns what the memory call of turn t of the window that starts
	// at start should write when the memory it shows is prev ("" at
	// t = start).
	Next(tr *dataset.Trajectory, start, t int, prev string) (string, error)
	// JudgeOn returns the right judge call for the action of turn t of tr
	// when the memory the judge reads is memory.
	JudgeOn(tr *dataset.Trajectory, t int, memory string) (decision, rationale string)
}

// Target is what the guard should write at one turn: the memory m_t the
// memory call writes (the judge of the turn reads it, and the memory call
// of the next turn shows it as the previous memory), and the judge's call.
type Target struct {
	Memory    string
	Decision  string // Approve or Reject
	Rationale string
	Where     string // where the target comes from, for errors ("FILE:LINE"; "" for a built-in teacher)
}

// ErrNotTaught is wrapped by Teacher.Targets for a trajectory the teacher
// has no targets for.
var ErrNotTaught = errors.New("no targets for this trajectory")

// Built-in teacher names (the values of sft.teacher besides a file).
const (
	NameSynth       = "synth"        // the synthetic world's perfect memory manager and judge
	NameSynthMyopic = "synth-myopic" // the synthetic world's myopic memory (the latest turn only) and the judge's rule on it
	NameSynthLeaky  = "synth-leaky"  // a leaky memory (each earlier identifier kept with probability P at every turn) and the judge's rule on it; "synth-leaky:P" sets P
)

// New returns the teacher sft.teacher names: NameSynth, NameSynthMyopic,
// NameSynthLeaky with its keep probability ("synth-leaky" keeps
// DefaultLeakyKeep, "synth-leaky:0.7" 0.7; the draws seeded by 0, so the
// same train file gives the same targets), all with memories within
// budgetChars characters, or a teacher file (ReadFile).
func New(spec string, budgetChars int) (Teacher, error) {
	switch spec {
	case NameSynth:
		return Synth{BudgetChars: budgetChars}, nil
	case NameSynthMyopic:
		return Synth{BudgetChars: budgetChars, Myopic: true}, nil
	case "":
		return nil, errors.New("sft.teacher: empty (want synth, synth-myopic, synth-leaky[:P] or a teacher file)")
	}
	if rest, ok := strings.CutPrefix(spec, NameSynthLeaky); ok && (rest == "" || rest[0] == ':') {
		keep := DefaultLeakyKeep
		if rest != "" {
			p, err := strconv.ParseFloat(rest[1:], 64)
			if err != nil || !(p >= 0 && p <= 1) {
				return nil, fmt.Errorf("sft.teacher: %q: want %s:P with P a keep probability in [0, 1]", spec, NameSynthLeaky)
			}
			keep = p
		}
		return Synth{BudgetChars: budgetChars, Leaky: true, Keep: keep}, nil
	}
	return ReadFile(spec)
}
