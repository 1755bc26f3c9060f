package eval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/rollout/prompt"
)

const goodLine = `{"trajectory_id":"t1","suite":"banking","attack_type":null,"attack":false,"utility":true,"turn":0,"label":0,"decision":"approve","judge_parsed":true,"memory_parsed":true,"memory_chars":12,"guard_tokens":100,"prefix_tokens":40}`

func TestReadDecisionsGood(t *testing.T) {
	second := strings.Replace(strings.Replace(goodLine, `"turn":0`, `"turn":1`, 1), `"decision":"approve"`, `"decision":"reject"`, 1)
	path := writeTemp(t, goodLine+"\n\n"+second+"\n")
	ds, err := ReadDecisions(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].AttackType != nil || ds[0].Utility == nil || !*ds[0].Utility ||
		ds[1].Turn != 1 || ds[1].Decision != prompt.DecisionReject || ds[0].GuardTokens != 100 || ds[0].PrefixTokens != 40 {
		t.Fatalf("got %+v", ds)
	}
}

// Lines that are right only in combination: a label 1 or an attack type
// on an attack run, and an unparsed vote under an approving majority.
func TestReadDecisionsGoodCombinations(t *testing.T) {
	attack := strings.NewReplacer(`"attack":false`, `"attack":true`, `"attack_type":null`, `"attack_type":"important_instructions"`,
		`"label":0`, `"label":1`).Replace(goodLine)
	withText := strings.Replace(goodLine, `"memory_chars":12`, `"memory_chars":12,"memory":"allowed: née","rationale":"ok"`, 1)
	voted := strings.NewReplacer(`"judge_parsed":true`, `"judge_parsed":false`,
		`"prefix_tokens":40`, `"prefix_tokens":40,"votes":["approve","reject","approve"],"vote_tokens":50`).Replace(goodLine)
	for _, line := range []string{attack, voted, withText} {
		if line == goodLine {
			t.Fatal("the edit did not apply")
		}
		if _, err := ReadDecisions(writeTemp(t, line+"\n")); err != nil {
			t.Errorf("%s: %v", line, err)
		}
	}
}

func writeTemp(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadDecisionsErrorsNameLineAndField(t *testing.T) {
	rep := func(old, new string) string { return strings.Replace(goodLine, old, new, 1) }
	turn1 := rep(`"turn":0`, `"turn":1`)
	cases := []struct {
		name, text, want string
	}{
		{"not json", "{oops\n", "line 1: not a JSON object"},
		{"missing field", rep(`"label":0,`, ""), `line 1: field "label": missing`},
		{"unknown field", rep(`"label":0,`, `"label":0,"lable":1,`), `line 1: field "lable": unknown field`},
		{"field given twice", rep(`"label":0,`, `"label":1,"label":0,`), `line 1: field "label": given twice`},
		{"invalid UTF-8", rep(`"suite":"`, "\"suite\":\"\xff"), `line 1: field "suite": holds invalid UTF-8`},
		{"null line", "null\n", "line 1: null, want a JSON object"},
		{"a line of 2 MB", `{"trajectory_id":"` + strings.Repeat("x", 2<<20) + `"}` + "\n", "line 1: line longer than 1048576 bytes"},
		{"null label", rep(`"label":0`, `"label":null`), `line 1: field "label": null`},
		{"bad type", rep(`"turn":0`, `"turn":"0"`), `line 1: field "turn": bad value "0"`},
		{"bad decision", rep(`"approve"`, `"allow"`), `line 1: field "decision": "allow"`},
		{"bad label", rep(`"label":0`, `"label":2`), `line 1: field "label": 2`},
		{"negative turn", rep(`"turn":0`, `"turn":-1`), `line 1: field "turn": -1`},
		{"memory of another length", rep(`"memory_chars":12`, `"memory_chars":12,"memory":"allowed: né"`), `line 1: field "memory": 11 code points, but "memory_chars" is 12`},
		{"prefix above total", rep(`"prefix_tokens":40`, `"prefix_tokens":101`), `line 1: field "prefix_tokens": 101`},
		{"votes disagree", rep(`"prefix_tokens":40`, `"prefix_tokens":40,"votes":["reject","reject","approve"]`), `line 1: field "decision": "approve", but the majority`},
		{"bad vote", rep(`"prefix_tokens":40`, `"prefix_tokens":40,"votes":["approve","maybe"]`), `line 1: field "votes": vote 1 is "maybe"`},
		{"label 1 on a benign run", rep(`"label":0`, `"label":1`), `line 1: field "label": 1 on a benign run`},
		{"attack type on a benign run", rep(`"attack_type":null`, `"attack_type":"important_instructions"`), `line 1: field "attack_type": "important_instructions" on a benign run`},
		{"unparsed judge approving without votes", rep(`"judge_parsed":true`, `"judge_parsed":false`), `line 1: field "decision": "approve" with "judge_parsed": false and no votes`},
		{"third line", goodLine + "\n" + turn1 + "\n" + rep(`"guard_tokens":100`, `"guard_tokens":-5`), `line 3: field "guard_tokens": -5`},
		{"duplicate turn", goodLine + "\n" + goodLine + "\n", `line 2: field "turn": trajectory "t1" has turn 0 twice (also `},
		{"gap in turns", goodLine + "\n" + rep(`"turn":0`, `"turn":2`) + "\n", `line 1: field "turn": trajectory "t1" has 2 turns but no turn 1`},
		{"facts disagree", goodLine + "\n" + strings.Replace(turn1, `"suite":"banking"`, `"suite":"slack"`, 1) + "\n", `line 2: field "suite": trajectory "t1" has a different suite on `},
		{"utility disagrees", goodLine + "\n" + strings.Replace(turn1, `"utility":true`, `"utility":null`, 1) + "\n", `line 2: field "utility"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeTemp(t, c.text)
			_, err := ReadDecisions(path)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v, want it to name %s and contain %q", err, path, c.want)
			}
		})
	}
}

func TestDecisionWriterAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "decisions.jsonl")
	dw, err := CreateDecisions(path)
	if err != nil {
		t.Fatal(err)
	}
	ds := handMade()
	for _, d := range ds[:3] {
		if err := dw.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("decisions.jsonl visible before Close: %v", err)
	}
	bad := ds[3]
	bad.Decision = "maybe"
	if err := dw.Write(bad); err == nil || !strings.Contains(err.Error(), `field "decision"`) {
		t.Fatalf("bad decision written: %v", err)
	}
	dw.Abort()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("Abort left files: %v", entries)
	}
	// A failed WriteDecisions leaves an existing file untouched.
	if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteDecisions(path, append(ds[:1:1], bad)); err == nil {
		t.Fatal("WriteDecisions accepted a bad decision")
	}
	if b, _ := os.ReadFile(path); string(b) != "old\n" {
		t.Fatalf("file changed by a failed write: %q", b)
	}
	if err := WriteDecisions(path, ds); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if n := strings.Count(string(b), "\n"); n != len(ds) {
		t.Fatalf("%d lines, want %d", n, len(ds))
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644", fi.Mode().Perm())
	}
}

func TestCheck(t *testing.T) {
	if err := Check(handMade()); err != nil {
		t.Fatalf("hand-made decisions fail Check: %v", err)
	}
	ds := handMade()
	ds = append(ds, ds[len(ds)-1]) // B3 turn 0 again
	if err := Check(ds); err == nil || !strings.Contains(err.Error(), `record 22: field "turn": trajectory "B3" has turn 0 twice`) {
		t.Fatalf("got %v", err)
	}
}
