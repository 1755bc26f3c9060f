package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/synth"
	"github.com/mageguard/mageguard/rollout"
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
	// NextMemory returns what the memory call of turn t of the window that
	// starts at start should write when the memory it shows is prev ("" at
	// t = start).
	NextMemory(tr *dataset.Trajectory, start, t int, prev string) (string, error)
	// JudgeOn returns the right judge call for the action of turn t of tr
	// when the memory the judge reads is memory.
	JudgeOn(tr *dataset.Trajectory, t int, memory string) (decision, rationale string)
}

// Target is what the guard should write at one turn: the memory m_t the
// memory call writes (the judge of the turn reads it, and the memory call
// of the next turn shows it as the previous memory), and the judge's call.
type Target struct {
	Memory    string
	Decision  string // rollout.DecisionApprove or rollout.DecisionReject
	Rationale string
	Where     string // where the target comes from, for errors ("FILE:LINE"; "" for a built-in teacher)
}

// ErrNotTaught is wrapped by Teacher.Targets for a trajectory the teacher
// has no targets for.
var ErrNotTaught = errors.New("no targets for this trajectory")

// Built-in teacher names (the values of sft.teacher besides a file).
const (
	TeacherSynth       = "synth"        // the synthetic world's perfect memory manager and judge
	TeacherSynthMyopic = "synth-myopic" // the synthetic world's myopic memory (the latest turn only) and the judge's rule on it
	TeacherSynthLeaky  = "synth-leaky"  // a leaky memory (each earlier identifier kept with probability p at every turn) and the judge's rule on it; "synth-leaky:P" sets p
)

// DefaultLeakyKeep is the keep probability of TeacherSynthLeaky without ":P".
const DefaultLeakyKeep = 0.5

// SynthTeacher is the synthetic world's built-in teacher (dataset/synth):
// the memory a memory manager following the world's rules keeps (the
// perfect one, or with Myopic the one that keeps only the latest turn),
// within BudgetChars, and the decision and rationale of the world's judge
// rule (synth.Judge) on that memory. With the perfect memory that rule is
// right on every action (synth.Decision); with the myopic one it misses
// every attack of gap ≥ 2, a judge consistent with the memory it reads;
// with a leaky one (synth.Teacher.Leaky) it catches an attack of gap g
// with probability p^(g−1), and every miss is the memory's.
type SynthTeacher struct {
	synth.Teacher
}

// Targets implements Teacher. A trajectory that is not synthetic wraps
// ErrNotTaught.
func (st SynthTeacher) Targets(tr *dataset.Trajectory, start, end int) ([]Target, error) {
	if tr.Source != synth.Source {
		return nil, fmt.Errorf("%w: trajectory %s is not synthetic (source %q): the %s teacher reads only data synth's trajectories", ErrNotTaught, tr.ID, tr.Source, st)
	}
	mems, err := st.Memories(tr, start, end)
	if err != nil {
		return nil, err
	}
	out := make([]Target, len(mems))
	for i, m := range mems {
		d, why := synth.Judge(m, tr.Turns[start+i].Action)
		out[i] = Target{Memory: m, Decision: d, Rationale: why}
	}
	return out, nil
}

// An adder is a teacher that says which memory calls add to the memory
// (sft.memory_changes draws among those).
type adder interface {
	Adds(prev, next string) bool
}

// Adds implements adder for a leaky memory: next lists an identifier prev
// does not. A call of a leaky memory that only drops is its coin flips,
// not a change to learn from: drawing those calls as well would weigh the
// warm start toward dropping (a model trained so kept 6% of the injected
// identifiers at lag 2 on a held-out file, where its teacher keeps 50%).
// For the other synth teachers a call changes the memory when next
// differs from prev.
func (st SynthTeacher) Adds(prev, next string) bool {
	if !st.Leaky {
		return next != prev
	}
	before := synth.ParseMemory(prev)
	for _, e := range synth.ParseMemory(next).Entries {
		if before.Role(e.ID) == "" {
			return true
		}
	}
	return false
}

// NextMemory implements Corrector: the world's rules applied to the memory
// shown (synth.Teacher.Next).
func (st SynthTeacher) NextMemory(tr *dataset.Trajectory, start, t int, prev string) (string, error) {
	return st.Next(tr, start, t, prev)
}

// JudgeOn implements Corrector: the world's judge rule on memory
// (synth.Judge), consistent with the memory the judge reads.
func (st SynthTeacher) JudgeOn(tr *dataset.Trajectory, t int, memory string) (decision, rationale string) {
	return synth.Judge(memory, tr.Turns[t].Action)
}

func (st SynthTeacher) String() string {
	switch {
	case st.Myopic:
		return TeacherSynthMyopic
	case st.Leaky:
		return TeacherSynthLeaky + ":" + strconv.FormatFloat(st.Keep, 'g', -1, 64)
	}
	return TeacherSynth
}

// FileTeacher is a teacher read from a JSONL file (ReadTeacherFile): the
// usual way to distil a stronger model's guard outputs. Each line is one
// turn of one trajectory:
//
//	{"trajectory_id": "...", "turn": 0, "memory": "...", "decision": "approve", "rationale": "..."}
//
// turn counts from 0 in the trajectory; memory is m_t, the memory after the
// memory call of that turn.
type FileTeacher struct {
	path  string
	turns map[string]map[int]Target // trajectory id → turn → target
}

// teacherLine is one line of a teacher file.
type teacherLine struct {
	TrajectoryID string `json:"trajectory_id"`
	Turn         int    `json:"turn"`
	Memory       string `json:"memory"`
	Decision     string `json:"decision"`
	Rationale    string `json:"rationale"`
}

// teacherKeys are a line's keys, all required.
var teacherKeys = []string{"trajectory_id", "turn", "memory", "decision", "rationale"}

// ReadTeacherFile reads and validates a teacher file. It is strict: every
// line (blank lines aside) is one JSON object with exactly the keys
// trajectory_id (a non-empty string), turn (an integer ≥ 0), memory and
// rationale (strings) and decision ("approve" or "reject"), with no key
// repeated, and no (trajectory_id, turn) on two lines. Errors name the
// file, the line and the field.
func ReadTeacherFile(path string) (*FileTeacher, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("teacher: %w", err)
	}
	defer f.Close()
	ft := &FileTeacher{path: path, turns: map[string]map[int]Target{}}
	lineOf := map[string]map[int]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 64*1024*1024)
	n := 0
	for sc.Scan() {
		n++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		where := fmt.Sprintf("%s:%d", path, n)
		l, err := parseTeacherLine(raw)
		if err != nil {
			return nil, fmt.Errorf("teacher %s: %w", where, err)
		}
		if lineOf[l.TrajectoryID] == nil {
			lineOf[l.TrajectoryID] = map[int]int{}
			ft.turns[l.TrajectoryID] = map[int]Target{}
		}
		if prev, dup := lineOf[l.TrajectoryID][l.Turn]; dup {
			return nil, fmt.Errorf("teacher %s: turn: trajectory %q turn %d is already on line %d", where, l.TrajectoryID, l.Turn, prev)
		}
		lineOf[l.TrajectoryID][l.Turn] = n
		ft.turns[l.TrajectoryID][l.Turn] = Target{Memory: l.Memory, Decision: l.Decision, Rationale: l.Rationale, Where: where}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("teacher %s:%d: %w", path, n+1, err)
	}
	if len(ft.turns) == 0 {
		return nil, fmt.Errorf("teacher %s: no lines", path)
	}
	return ft, nil
}

// parseTeacherLine decodes one line strictly; errors start with the field.
func parseTeacherLine(raw []byte) (teacherLine, error) {
	var l teacherLine
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return l, errors.New("not a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return l, fmt.Errorf("not valid JSON: %v", err)
		}
		key := tok.(string) // inside an object the decoder yields string keys
		if seen[key] {
			return l, fmt.Errorf("%s: repeated", key)
		}
		seen[key] = true
		var v any
		if err := dec.Decode(&v); err != nil {
			return l, fmt.Errorf("%s: not valid JSON: %v", key, err)
		}
		str := func(dst *string) error {
			s, ok := v.(string)
			if !ok {
				return fmt.Errorf("%s: want a string, got %s", key, jsonKind(v))
			}
			*dst = s
			return nil
		}
		switch key {
		case "trajectory_id":
			if err := str(&l.TrajectoryID); err != nil {
				return l, err
			}
			if l.TrajectoryID == "" {
				return l, fmt.Errorf("trajectory_id: empty")
			}
		case "turn":
			num, ok := v.(json.Number)
			t, err := num.Int64()
			if !ok || err != nil || t < 0 || t > 1<<30 {
				return l, fmt.Errorf("turn: want an integer >= 0, got %s", jsonText(v))
			}
			l.Turn = int(t)
		case "memory":
			if err := str(&l.Memory); err != nil {
				return l, err
			}
		case "decision":
			if err := str(&l.Decision); err != nil {
				return l, err
			}
			if l.Decision != rollout.DecisionApprove && l.Decision != rollout.DecisionReject {
				return l, fmt.Errorf("decision: want %q or %q, got %q", rollout.DecisionApprove, rollout.DecisionReject, l.Decision)
			}
		case "rationale":
			if err := str(&l.Rationale); err != nil {
				return l, err
			}
		default:
			return l, fmt.Errorf("%s: unknown key (want %s)", key, strings.Join(teacherKeys, ", "))
		}
	}
	if _, err := dec.Token(); err != nil {
		return l, fmt.Errorf("not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return l, errors.New("text after the JSON object")
	}
	for _, k := range teacherKeys {
		if !seen[k] {
			return l, fmt.Errorf("%s: missing", k)
		}
	}
	return l, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}

func jsonText(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// Targets implements Teacher: the file's lines for turns [start, end) of
// tr. A trajectory without lines wraps ErrNotTaught; one with lines must
// have a line for every turn, and none beyond its last.
func (ft *FileTeacher) Targets(tr *dataset.Trajectory, start, end int) ([]Target, error) {
	turns, ok := ft.turns[tr.ID]
	if !ok {
		return nil, fmt.Errorf("%w: trajectory %s is not in teacher %s", ErrNotTaught, tr.ID, ft.path)
	}
	for t, tg := range turns {
		if t >= len(tr.Turns) {
			return nil, fmt.Errorf("teacher %s: turn: trajectory %s has %d turns, no turn %d", tg.Where, tr.ID, len(tr.Turns), t)
		}
	}
	out := make([]Target, 0, end-start)
	for t := start; t < end; t++ {
		tg, ok := turns[t]
		if !ok {
			return nil, fmt.Errorf("teacher %s: trajectory %s has no line for turn %d (it has turns %s)", ft.path, tr.ID, t, turnList(turns))
		}
		out = append(out, tg)
	}
	return out, nil
}

// Unused returns the trajectory ids of the file that are not among ids,
// sorted.
func (ft *FileTeacher) Unused(ids map[string]bool) []string {
	var out []string
	for id := range ft.turns {
		if !ids[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

func (ft *FileTeacher) String() string { return ft.path }

// turnList writes a set of turns as "0-2, 4".
func turnList(turns map[int]Target) string {
	var ts []int
	for t := range turns {
		ts = append(ts, t)
	}
	sort.Ints(ts)
	var parts []string
	for i := 0; i < len(ts); {
		j := i
		for j+1 < len(ts) && ts[j+1] == ts[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", ts[i], ts[j]))
		} else {
			parts = append(parts, fmt.Sprint(ts[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// NewTeacher returns the teacher sft.teacher names: TeacherSynth,
// TeacherSynthMyopic, TeacherSynthLeaky with its keep probability
// ("synth-leaky" keeps DefaultLeakyKeep, "synth-leaky:0.7" 0.7; the draws
// seeded by 0, so the same train file gives the same targets), all with
// memories within budgetChars characters, or a teacher file.
func NewTeacher(spec string, budgetChars int) (Teacher, error) {
	switch spec {
	case TeacherSynth:
		return SynthTeacher{synth.Teacher{BudgetChars: budgetChars}}, nil
	case TeacherSynthMyopic:
		return SynthTeacher{synth.Teacher{BudgetChars: budgetChars, Myopic: true}}, nil
	case "":
		return nil, errors.New("sft.teacher: empty (want synth, synth-myopic, synth-leaky[:P] or a teacher file)")
	}
	if rest, ok := strings.CutPrefix(spec, TeacherSynthLeaky); ok && (rest == "" || rest[0] == ':') {
		keep := DefaultLeakyKeep
		if rest != "" {
			p, err := strconv.ParseFloat(rest[1:], 64)
			if err != nil || !(p >= 0 && p <= 1) {
				return nil, fmt.Errorf("sft.teacher: %q: want %s:P with P a keep probability in [0, 1]", spec, TeacherSynthLeaky)
			}
			keep = p
		}
		return SynthTeacher{synth.Teacher{BudgetChars: budgetChars, Leaky: true, Keep: keep}}, nil
	}
	return ReadTeacherFile(spec)
}
