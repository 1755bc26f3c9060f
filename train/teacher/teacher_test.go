package teacher

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/dataset"
	"github.com/mageguard/mageguard/dataset/synth"
)

func writeTeacher(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "teacher.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const goodTeacherLine = `{"trajectory_id": "a", "turn": 0, "memory": "m0", "decision": "approve", "rationale": "fine"}`

// TestTeacherFileErrorsNameFileLineAndField: every malformed line is
// refused with the file, its line number and the field at fault.
func TestTeacherFileErrorsNameFileLineAndField(t *testing.T) {
	for _, tc := range []struct {
		name, line, want string
	}{
		{"not an object", `[1, 2]`, "not a JSON object"},
		{"broken JSON", `{"trajectory_id": "a", "turn": 1,`, "not valid JSON"},
		{"text after", `{"trajectory_id": "a", "turn": 1, "memory": "", "decision": "reject", "rationale": ""} x`, "text after the JSON object"},
		{"missing memory", `{"trajectory_id": "a", "turn": 1, "decision": "reject", "rationale": ""}`, "memory: missing"},
		{"missing turn", `{"trajectory_id": "a", "memory": "", "decision": "reject", "rationale": ""}`, "turn: missing"},
		{"unknown key", `{"trajectory_id": "a", "turn": 1, "memory": "", "decision": "reject", "rationale": "", "label": 1}`, "label: unknown key"},
		{"repeated key", `{"trajectory_id": "a", "turn": 1, "turn": 2, "memory": "", "decision": "reject", "rationale": ""}`, "turn: repeated"},
		{"empty id", `{"trajectory_id": "", "turn": 1, "memory": "", "decision": "reject", "rationale": ""}`, "trajectory_id: empty"},
		{"id not a string", `{"trajectory_id": 7, "turn": 1, "memory": "", "decision": "reject", "rationale": ""}`, "trajectory_id: want a string, got a number"},
		{"negative turn", `{"trajectory_id": "a", "turn": -1, "memory": "", "decision": "reject", "rationale": ""}`, "turn: want an integer >= 0, got -1"},
		{"fractional turn", `{"trajectory_id": "a", "turn": 1.5, "memory": "", "decision": "reject", "rationale": ""}`, "turn: want an integer >= 0, got 1.5"},
		{"turn as a string", `{"trajectory_id": "a", "turn": "1", "memory": "", "decision": "reject", "rationale": ""}`, `turn: want an integer >= 0, got "1"`},
		{"memory null", `{"trajectory_id": "a", "turn": 1, "memory": null, "decision": "reject", "rationale": ""}`, "memory: want a string, got null"},
		{"bad decision", `{"trajectory_id": "a", "turn": 1, "memory": "", "decision": "block", "rationale": ""}`, `decision: want "approve" or "reject", got "block"`},
		{"rationale object", `{"trajectory_id": "a", "turn": 1, "memory": "", "decision": "reject", "rationale": {}}`, "rationale: want a string, got an object"},
		{"invalid UTF-8", "{\"trajectory_id\": \"a\", \"turn\": 1, \"memory\": \"\xff\", \"decision\": \"reject\", \"rationale\": \"\"}", "memory: holds invalid UTF-8 (byte 0xff)"},
		{"lone surrogate", `{"trajectory_id": "a", "turn": 1, "memory": "", "decision": "reject", "rationale": "\ud800"}`, `rationale: holds the escape \ud800 of a lone UTF-16 surrogate`},
		{"duplicate turn", `{"trajectory_id": "a", "turn": 0, "memory": "x", "decision": "reject", "rationale": ""}`, `turn: trajectory "a" turn 0 is already on line 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeTeacher(t, goodTeacherLine, "", tc.line) // the bad line is line 3
			_, err := ReadFile(path)
			if err == nil {
				t.Fatal("accepted")
			}
			if want := path + ":3: " + tc.want; !strings.Contains(err.Error(), want) {
				t.Errorf("error %q\nwant it to contain %q", err, want)
			}
		})
	}
}

// TestFileTeacherCoverage: a file's targets are returned for the turns
// asked; a trajectory without lines is not taught (SFT leaves it out); one
// with a missing turn, or a turn past its end, is an error naming it.
func TestFileTeacherCoverage(t *testing.T) {
	line := func(id string, turn int) string {
		return fmt.Sprintf(`{"trajectory_id": %q, "turn": %d, "memory": "m%d", "decision": "approve", "rationale": "r%d"}`, id, turn, turn, turn)
	}
	path := writeTeacher(t, line("a", 1), line("a", 0), line("a", 2), line("b", 0), line("b", 2), line("c", 0), line("c", 1))
	ft, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	traj := func(id string, n int) *dataset.Trajectory {
		return &dataset.Trajectory{ID: id, Turns: make([]dataset.Turn, n)}
	}
	got, err := ft.Targets(traj("a", 3), 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Memory != "m1" || got[1].Rationale != "r2" || got[0].Where != path+":1" {
		t.Errorf("targets %+v", got)
	}
	if _, err := ft.Targets(traj("z", 3), 0, 3); !errors.Is(err, ErrNotTaught) {
		t.Errorf("a trajectory without lines: %v, want ErrNotTaught", err)
	}
	if _, err := ft.Targets(traj("b", 3), 0, 3); err == nil || !strings.Contains(err.Error(), "trajectory b has no line for turn 1 (it has turns 0, 2)") {
		t.Errorf("a missing turn: %v", err)
	}
	if _, err := ft.Targets(traj("c", 1), 0, 1); err == nil || !strings.Contains(err.Error(), path+":7: turn: trajectory c has 1 turns, no turn 1") {
		t.Errorf("a turn past the end: %v", err)
	}
	if u := ft.Unused(map[string]bool{"a": true}); strings.Join(u, ",") != "b,c" {
		t.Errorf("unused %v, want b and c", u)
	}
}

// TestSynthTeachers: the built-in teachers' targets are the synth
// teacher's memories with the judge's rule on them; the perfect teacher's
// decision and rationale are every action's right ones (Decision),
// the myopic one's decision misses exactly the malicious actions of
// attacks with a gap of 2 or more (its rationales say what its memory
// knows: a forgotten allowed id "is not flagged").
func TestSynthTeachers(t *testing.T) {
	so := synth.DefaultOptions()
	so.N, so.Seed = 60, 9
	trajs, err := synth.Generate(so)
	if err != nil {
		t.Fatal(err)
	}
	missed := 0
	for _, myopic := range []bool{false, true} {
		st := Synth{BudgetChars: 100, Myopic: myopic}
		for _, tr := range trajs {
			got, err := st.Targets(tr, 0, len(tr.Turns))
			if err != nil {
				t.Fatal(err)
			}
			mems, _ := st.Memories(tr, 0, len(tr.Turns))
			for i, tg := range got {
				if tg.Memory != mems[i] {
					t.Fatalf("%s turn %d: memory %q, want %q", tr.ID, i, tg.Memory, mems[i])
				}
				d, why := Decision(tr, i)
				gap := 0
				if tr.AttackType != nil {
					gap, _ = synth.Gap(*tr.AttackType)
				}
				wrong := myopic && tr.Turns[i].Label == 1 && gap >= 2
				if wrong {
					missed++
					if tg.Decision != "approve" {
						t.Errorf("%s turn %d: the myopic teacher rejects a gap-%d attack", tr.ID, i, gap)
					}
				} else if tg.Decision != d || (!myopic && tg.Rationale != why) {
					t.Errorf("%s turn %d (myopic %v): %s %q, want %s %q", tr.ID, i, myopic, tg.Decision, tg.Rationale, d, why)
				}
			}
		}
	}
	if missed == 0 {
		t.Fatal("no attack of gap >= 2 in the data: the test checks nothing")
	}
	if _, err := (Synth{}).Targets(&dataset.Trajectory{ID: "x", Source: "agentdojo", Turns: make([]dataset.Turn, 1)}, 0, 1); !errors.Is(err, ErrNotTaught) {
		t.Errorf("a trajectory of another source: %v, want ErrNotTaught", err)
	}
}

// TestNewTeacherLeaky: "synth-leaky" is the leaky synth teacher with the
// default keep probability, "synth-leaky:P" with P; its targets are the
// leaky memories with the judge's rule on them, the same on every call;
// a bad P is an error naming the spec.
func TestNewTeacherLeaky(t *testing.T) {
	so := synth.DefaultOptions()
	so.N, so.Seed = 60, 9
	trajs, err := synth.Generate(so)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		spec string
		keep float64
	}{
		{"synth-leaky", 0.5},
		{"synth-leaky:0.7", 0.7},
		{"synth-leaky:1", 1},
	} {
		tch, err := New(tc.spec, 100)
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		st, ok := tch.(Synth)
		if !ok || !st.Leaky || st.Keep != tc.keep || st.BudgetChars != 100 {
			t.Fatalf("%s: %#v, want a leaky synth teacher keeping %g", tc.spec, tch, tc.keep)
		}
		if want := "synth-leaky:" + strconv.FormatFloat(tc.keep, 'g', -1, 64); st.String() != want {
			t.Errorf("%s: String() = %q, want %q", tc.spec, st.String(), want)
		}
		again, _ := New(tc.spec, 100)
		for _, tr := range trajs {
			got, err := st.Targets(tr, 0, len(tr.Turns))
			if err != nil {
				t.Fatal(err)
			}
			twice, _ := again.Targets(tr, 0, len(tr.Turns))
			mems, _ := Synth{BudgetChars: 100, Leaky: true, Keep: tc.keep}.Memories(tr, 0, len(tr.Turns))
			for i, tg := range got {
				d, why := Judge(mems[i], tr.Turns[i].Action)
				if tg.Memory != mems[i] || tg.Decision != d || tg.Rationale != why {
					t.Fatalf("%s %s turn %d: %+v, want memory %q, %s %q", tc.spec, tr.ID, i, tg, mems[i], d, why)
				}
				if twice[i] != tg {
					t.Fatalf("%s %s turn %d: %+v, then %+v", tc.spec, tr.ID, i, tg, twice[i])
				}
			}
		}
	}
	for _, spec := range []string{"synth-leaky:", "synth-leaky:1.5", "synth-leaky:-0.1", "synth-leaky:half"} {
		if _, err := New(spec, 100); err == nil || !strings.Contains(err.Error(), spec) {
			t.Errorf("%s: error %v, want one naming the spec", spec, err)
		}
	}
}

// TestLeakyTeacherAdds: a leaky teacher's memory changes are the calls
// that add an identifier, not those that only drop; the other synth
// teachers count every call whose memory differs.
func TestLeakyTeacherAdds(t *testing.T) {
	leaky := Synth{Leaky: true, Keep: 0.5}
	perfect := Synth{}
	for _, tc := range []struct {
		prev, next    string
		leak, perfect bool
	}{
		{"", "acct-bako allowed", true, true},
		{"acct-bako allowed", "none", false, true},
		{"acct-bako allowed, acct-miru allowed", "acct-miru allowed", false, true},
		{"acct-bako allowed", "acct-tesa injected", true, true},
		{"acct-bako allowed", "acct-tesa injected, acct-bako allowed", true, true},
		{"acct-bako allowed", "acct-bako allowed", false, false},
	} {
		if got := leaky.Adds(tc.prev, tc.next); got != tc.leak {
			t.Errorf("leaky %q -> %q: change %v, want %v", tc.prev, tc.next, got, tc.leak)
		}
		if got := perfect.Adds(tc.prev, tc.next); got != tc.perfect {
			t.Errorf("perfect %q -> %q: change %v, want %v", tc.prev, tc.next, got, tc.perfect)
		}
	}
}

// TestPerfectMemoriesAreTheTeachers: dataset/synth's perfect memories
// (what eval's retention figures compare a guard's memories with) are the
// unbounded perfect teacher's, turn by turn.
func TestPerfectMemoriesAreTheTeachers(t *testing.T) {
	so := synth.DefaultOptions()
	so.N, so.Seed = 40, 11
	trajs, err := synth.Generate(so)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range trajs {
		want, err := Synth{}.Memories(tr, 0, len(tr.Turns))
		if err != nil {
			t.Fatal(err)
		}
		got, err := synth.PerfectMemories(tr)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: PerfectMemories = %q, %v; the teacher's %q", tr.ID, got, err, want)
		}
	}
}
