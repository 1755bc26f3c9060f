package teacher

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/internal/strictjson"
)

// File is a teacher read from a JSONL file (ReadFile): the
// usual way to distil a stronger model's guard outputs. Each line is one
// turn of one trajectory:
//
//	{"trajectory_id": "...", "turn": 0, "memory": "...", "decision": "approve", "rationale": "..."}
//
// turn counts from 0 in the trajectory; memory is m_t, the memory after the
// memory call of that turn.
type File struct {
	path  string
	turns map[string]map[int]Target // trajectory id → turn → target
}

// fileLine is one line of a teacher file.
type fileLine struct {
	TrajectoryID string `json:"trajectory_id"`
	Turn         int    `json:"turn"`
	Memory       string `json:"memory"`
	Decision     string `json:"decision"`
	Rationale    string `json:"rationale"`
}

// fileKeys are a line's keys, all required.
var fileKeys = []string{"trajectory_id", "turn", "memory", "decision", "rationale"}

// ReadFile reads and validates a teacher file. It is strict: every
// line (blank lines aside) is one JSON object (strictjson: valid UTF-8, no
// escaped lone surrogate) with exactly the keys
// trajectory_id (a non-empty string), turn (an integer ≥ 0), memory and
// rationale (strings) and decision ("approve" or "reject"), with no key
// repeated, and no (trajectory_id, turn) on two lines. Errors name the
// file, the line and the field.
func ReadFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("teacher: %w", err)
	}
	defer f.Close()
	ft := &File{path: path, turns: map[string]map[int]Target{}}
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
		l, err := parseLine(raw)
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

// parseLine decodes one line strictly (strictjson: one JSON object, no key
// given twice, nothing after it, no invalid UTF-8 or lone surrogate);
// errors start with the field.
func parseLine(raw []byte) (fileLine, error) {
	var l fileLine
	members, err := strictjson.Object(raw, "", fileKeys...)
	if err != nil {
		var oe *strictjson.ObjectError
		if !errors.As(err, &oe) {
			return l, err
		}
		switch oe.Kind {
		case strictjson.NotObject:
			return l, errors.New("not a JSON object")
		case strictjson.Trailing:
			return l, errors.New("text after the JSON object")
		case strictjson.Duplicate:
			return l, fmt.Errorf("%s: repeated", oe.Path)
		case strictjson.Unknown:
			return l, fmt.Errorf("%s: unknown key (want %s)", oe.Path, strings.Join(fileKeys, ", "))
		}
		return l, err
	}
	if where, problem, ok := strictjson.Check(raw); !ok {
		return l, fmt.Errorf("%s: %s", where, problem)
	}
	str := func(key string, dst *string) error {
		if k := kind(members[key]); k != "a string" {
			return fmt.Errorf("%s: want a string, got %s", key, k)
		}
		return json.Unmarshal(members[key], dst)
	}
	for _, key := range fileKeys {
		v, ok := members[key]
		if !ok {
			continue
		}
		switch key {
		case "trajectory_id":
			if err := str(key, &l.TrajectoryID); err != nil {
				return l, err
			}
			if l.TrajectoryID == "" {
				return l, fmt.Errorf("trajectory_id: empty")
			}
		case "turn":
			t, err := strconv.ParseInt(string(v), 10, 64)
			if kind(v) != "a number" || err != nil || t < 0 || t > 1<<30 {
				return l, fmt.Errorf("turn: want an integer >= 0, got %s", v)
			}
			l.Turn = int(t)
		case "memory":
			if err := str(key, &l.Memory); err != nil {
				return l, err
			}
		case "decision":
			if err := str(key, &l.Decision); err != nil {
				return l, err
			}
			if l.Decision != Approve && l.Decision != Reject {
				return l, fmt.Errorf("decision: want %q or %q, got %q", Approve, Reject, l.Decision)
			}
		case "rationale":
			if err := str(key, &l.Rationale); err != nil {
				return l, err
			}
		}
	}
	for _, k := range fileKeys {
		if _, ok := members[k]; !ok {
			return l, fmt.Errorf("%s: missing", k)
		}
	}
	return l, nil
}

// kind names the kind of the JSON value raw, for errors: "a string",
// "a number", "null", ...
func kind(raw []byte) string {
	switch raw[0] {
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '[':
		return "an array"
	case '{':
		return "an object"
	}
	return "a number"
}

// Targets implements Teacher: the file's lines for turns [start, end) of
// tr. A trajectory without lines wraps ErrNotTaught; one with lines must
// have a line for every turn, and none beyond its last.
func (ft *File) Targets(tr *dataset.Trajectory, start, end int) ([]Target, error) {
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
func (ft *File) Unused(ids map[string]bool) []string {
	var out []string
	for id := range ft.turns {
		if !ids[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// String names the teacher by its file's path.
func (ft *File) String() string { return ft.path }

// turnList writes a set of turns as "0-2, 4".
func turnList(turns map[int]Target) string {
	ts := slices.Sorted(maps.Keys(turns))
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
