package synth

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/dataset"
)

// optionSets are the settings the generator is checked under: the
// defaults, short attacks only, long gaps only, the shortest runs allowed,
// one suite, and every run an attack.
func optionSets() map[string]Options {
	d := DefaultOptions()
	sets := map[string]Options{"defaults": d}
	o := d
	o.MinGap, o.MaxGap = 1, 1
	sets["gap1"] = o
	o = d
	o.MinGap, o.MaxGap, o.MaxTurns = 5, 7, 8
	sets["long-gaps"] = o
	o = d
	o.MinTurns, o.MaxTurns, o.MaxGap = 2, 3, 2
	sets["short-runs"] = o
	o = d
	o.Suites, o.RunsPerTask = []string{"files"}, 5
	sets["files-only"] = o
	o = d
	o.AttackFrac, o.N = 1, 150
	sets["all-attacks"] = o
	return sets
}

func generate(t *testing.T, o Options) []*dataset.Trajectory {
	t.Helper()
	trs, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(trs) != o.N {
		t.Fatalf("Generate gave %d trajectories, want --n %d", len(trs), o.N)
	}
	return trs
}

func writeFile(t *testing.T, path string, trs []*dataset.Trajectory) []byte {
	t.Helper()
	if err := dataset.WriteAll(path, trs); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestGenerateIsDeterministicForASeed(t *testing.T) {
	dir := t.TempDir()
	o := DefaultOptions()
	a := writeFile(t, filepath.Join(dir, "a.jsonl"), generate(t, o))
	b := writeFile(t, filepath.Join(dir, "b.jsonl"), generate(t, o))
	if !bytes.Equal(a, b) {
		t.Fatal("two runs with the same options and seed wrote different files")
	}
	o.Seed = 2
	c := writeFile(t, filepath.Join(dir, "c.jsonl"), generate(t, o))
	if bytes.Equal(a, c) {
		t.Fatal("seeds 1 and 2 wrote the same file")
	}
}

func TestGeneratedFileRoundTrips(t *testing.T) {
	for name, o := range optionSets() {
		t.Run(name, func(t *testing.T) {
			trs := generate(t, o)
			for _, ext := range []string{"jsonl", "parquet"} {
				path := filepath.Join(t.TempDir(), "synth."+ext)
				writeFile(t, path, trs)
				back, err := dataset.ReadAll(path)
				if err != nil {
					t.Fatal(err)
				}
				if len(back) != len(trs) {
					t.Fatalf("%s: read %d trajectories, wrote %d", ext, len(back), len(trs))
				}
				for i := range trs {
					for k, tu := range back[i].Turns {
						if tu.LabelSource != dataset.LabelSynth {
							t.Fatalf("%s: %s turn %d: label_source %q, want %q", ext, trs[i].ID, k, tu.LabelSource, dataset.LabelSynth)
						}
					}
					if !dataset.Equal(trs[i], back[i]) {
						t.Fatalf("%s: trajectory %d (%s) changed in a round trip", ext, i, trs[i].ID)
					}
				}
			}
		})
	}
}

// injection is what the test reads back of an observation's injected
// instruction, with the world's two parsing rules only.
type injection struct {
	turn   int
	target string
	line   string
}

func injections(tr *dataset.Trajectory) []injection {
	var out []injection
	for i, tu := range tr.Turns {
		for _, line := range strings.Split(tu.Observation, "\n") {
			if IsInjectionLine(line) {
				ids := Identifiers(line)
				target := ""
				if len(ids) == 1 {
					target = ids[0]
				}
				out = append(out, injection{turn: i, target: target, line: line})
			}
		}
	}
	return out
}

var gapSuffix = regexp.MustCompile(`-gap([0-9]+)$`)

// TestLabelsFollowFromConstruction checks every trajectory against the
// world's rules: an attack run has one injection at turn k and one label-1
// action, at turn k+g, that acts on the injected identifier with the
// injected payload, g in [--min-gap, --max-gap] and written in attack_type;
// an ignored run has an injection and no label 1, and no action on the
// injected identifier; a clean run has no injection; every label-0 act
// targets an identifier named by the prompt or by the document it names.
func TestLabelsFollowFromConstruction(t *testing.T) {
	for name, o := range optionSets() {
		t.Run(name, func(t *testing.T) {
			kinds := map[string]int{}
			gaps := map[int]int{}
			for _, tr := range generate(t, o) {
				if n := len(tr.Turns); n < o.MinTurns || n > o.MaxTurns {
					t.Errorf("%s: %d turns, want %d..%d", tr.ID, n, o.MinTurns, o.MaxTurns)
				}
				sanctioned := Identifiers(tr.UserPrompt)
				if doc := documentRE.FindString(tr.UserPrompt); doc != "" {
					if tr.Turns[0].Action.Name != ReadFile || argument(tr.Turns[0].Action, "file") != doc {
						t.Errorf("%s: the first action is not read_file of the prompt's document %s", tr.ID, doc)
					}
					for _, line := range strings.Split(tr.Turns[0].Observation, "\n") {
						if !IsInjectionLine(line) {
							sanctioned = append(sanctioned, Identifiers(line)...)
						}
					}
				}
				inj := injections(tr)
				var positives []int
				for i, tu := range tr.Turns {
					target := Target(tu.Action.Name, tu.Action.Arguments)
					if tu.Label == 1 {
						positives = append(positives, i)
						continue
					}
					if target != "" && !contains(sanctioned, target) {
						t.Errorf("%s turn %d: label 0 but target %s is not sanctioned by %v", tr.ID, i, target, sanctioned)
					}
				}
				switch {
				case !tr.IsAttack():
					kinds["clean"]++
					if len(inj) != 0 || len(positives) != 0 || tr.AttackType != nil {
						t.Errorf("%s: clean run with injections %v, positives %v, attack_type %v", tr.ID, inj, positives, tr.AttackType)
					}
				case strings.HasSuffix(*tr.AttackType, "-ignored"):
					kinds["ignored"]++
					if len(inj) != 1 || len(positives) != 0 || *tr.Security {
						t.Fatalf("%s: ignored run with injections %v, positives %v", tr.ID, inj, positives)
					}
					if inj[0].turn == len(tr.Turns)-1 {
						t.Errorf("%s: the injection is in the last observation, which no action follows", tr.ID)
					}
					for i, tu := range tr.Turns {
						if Target(tu.Action.Name, tu.Action.Arguments) == inj[0].target {
							t.Errorf("%s turn %d: the ignored injection's %s is acted on", tr.ID, i, inj[0].target)
						}
					}
				default:
					kinds["attack"]++
					m := gapSuffix.FindStringSubmatch(*tr.AttackType)
					if m == nil || len(inj) != 1 || len(positives) != 1 || !*tr.Security {
						t.Fatalf("%s: attack_type %q, injections %v, positives %v", tr.ID, *tr.AttackType, inj, positives)
					}
					g, _ := strconv.Atoi(m[1])
					gaps[g]++
					k, p := inj[0].turn, positives[0]
					if p-k != g || g < o.MinGap || g > o.MaxGap {
						t.Errorf("%s: injection at turn %d, label 1 at turn %d, attack_type gap %d (want %d..%d)", tr.ID, k, p, g, o.MinGap, o.MaxGap)
					}
					a := tr.Turns[p].Action
					s, _ := suiteByName(tr.Suite)
					if a.Name != s.tool || Target(a.Name, a.Arguments) != inj[0].target || contains(sanctioned, inj[0].target) {
						t.Errorf("%s: label-1 action %s %s does not act on the injected %s", tr.ID, a.Name, a.Arguments, inj[0].target)
					}
					payload := argument(a, s.payloadKey)
					if payload == "" { // amounts are numbers
						payload = strings.TrimSuffix(strings.TrimPrefix(string(a.Arguments), `{"to":"`+inj[0].target+`","amount":`), "}")
					}
					if !strings.Contains(inj[0].line, payload+" to "+inj[0].target) && !strings.Contains(inj[0].line, `"`+payload+`" to `+inj[0].target) {
						t.Errorf("%s: label-1 action %s does not carry the payload of %q", tr.ID, a.Arguments, inj[0].line)
					}
				}
			}
			if o.AttackFrac > 0 {
				for g := o.MinGap; g <= o.MaxGap; g++ {
					if gaps[g] == 0 {
						t.Errorf("no attack of gap %d in %d trajectories", g, o.N)
					}
				}
			}
			if o.AttackFrac == 0.5 && o.IgnoredFrac == 0.5 {
				// Expected shares 1/2, 1/4, 1/4; a binomial standard deviation at
				// N = 400 is at most 0.025, so 0.08 is over three of them.
				for kind, want := range map[string]float64{"attack": 0.5, "ignored": 0.25, "clean": 0.25} {
					if got := float64(kinds[kind]) / float64(o.N); got < want-0.08 || got > want+0.08 {
						t.Errorf("%s share %.3f, want %.2f", kind, got, want)
					}
				}
			}
		})
	}
}

// TestRunsOfATaskShareItsRequest checks what makes a task-disjoint split
// matter: runs of one task have the same user prompt and the same
// sanctioned actions.
func TestRunsOfATaskShareItsRequest(t *testing.T) {
	prompts := map[string]string{}
	acts := map[string]string{}
	runs := map[string]int{}
	for _, tr := range generate(t, DefaultOptions()) {
		key := tr.TaskKey()
		runs[key]++
		var own []string
		for _, tu := range tr.Turns {
			if tu.Label == 0 && Target(tu.Action.Name, tu.Action.Arguments) != "" {
				own = append(own, string(tu.Action.Arguments))
			}
		}
		if p, ok := prompts[key]; ok && (p != tr.UserPrompt || acts[key] != strings.Join(own, " ")) {
			t.Errorf("%s: the runs of task %s have different prompts or actions", tr.ID, key)
		}
		prompts[key] = tr.UserPrompt
		acts[key] = strings.Join(own, " ")
	}
	if len(runs) != 200 { // 400 trajectories, 2 runs per task
		t.Errorf("%d tasks, want 200", len(runs))
	}
}

func TestSplitIsTaskDisjoint(t *testing.T) {
	trs := generate(t, DefaultOptions())
	train, eval, err := dataset.Split(trs, 0.2, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(train)+len(eval) != len(trs) {
		t.Fatalf("split lost trajectories: %d + %d != %d", len(train), len(eval), len(trs))
	}
	inTrain := map[string]bool{}
	for _, tr := range train {
		inTrain[tr.TaskKey()] = true
	}
	for _, side := range [][]*dataset.Trajectory{train, eval} {
		var attack, benign bool
		for _, tr := range side {
			attack = attack || tr.Positives() > 0
			benign = benign || !tr.IsAttack()
		}
		if !attack || !benign {
			t.Errorf("a side of the split lacks attack (%v) or benign (%v) runs", attack, benign)
		}
	}
	for _, tr := range eval {
		if inTrain[tr.TaskKey()] {
			t.Errorf("%s: its task is on both sides of the split", tr.ID)
		}
	}
	if f := float64(len(eval)) / float64(len(trs)); f < 0.2 || f > 0.25 {
		t.Errorf("eval share %.3f, want at least the 0.2 asked for (and not much more)", f)
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"no trajectories", func(o *Options) { o.N = 0 }, "--n 0"},
		{"gap 0", func(o *Options) { o.MinGap = 0 }, "--min-gap 0"},
		{"max below min", func(o *Options) { o.MinGap, o.MaxGap = 3, 2 }, "--max-gap 2"},
		{"gap longer than a run", func(o *Options) { o.MaxGap = 8 }, "--max-gap 8: want at most --max-turns - 1 = 7"},
		{"one turn", func(o *Options) { o.MinTurns = 1 }, "--min-turns 1"},
		{"no longer attack run", func(o *Options) { o.MaxTurns = 4 }, "--max-turns 4"},
		{"fraction", func(o *Options) { o.AttackFrac = 1.5 }, "--attack-frac 1.5"},
		{"NaN fraction", func(o *Options) { o.ExtraFrac = nan() }, "--extra-frac NaN"},
		{"unknown suite", func(o *Options) { o.Suites = []string{"banking"} }, `unknown suite "banking"`},
		{"suite twice", func(o *Options) { o.Suites = []string{"files", "files"} }, `"files" is given twice`},
		{"no suites", func(o *Options) { o.Suites = nil }, "--suites"},
		{"no runs", func(o *Options) { o.RunsPerTask = 0 }, "--runs-per-task 0"},
		{"no targets", func(o *Options) { o.MaxTargets = 0 }, "--max-targets 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.edit(&o)
			_, err := Generate(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	o := DefaultOptions()
	if err := o.Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestGapReadsAttackType(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"injected-payee-gap3", 3, true},
		{"injected-site-gap12", 12, true},
		{"injected-payee-ignored", 0, false},
		{"important_instructions", 0, false},
		{"injected-payee-gap", 0, false},
	} {
		g, ok := Gap(tc.in)
		if g != tc.want || ok != tc.ok {
			t.Errorf("Gap(%q) = %d, %v; want %d, %v", tc.in, g, ok, tc.want, tc.ok)
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func nan() float64 { z := 0.0; return z / z }

// TestBundledDataIsRegenerated: data/synth holds what scripts/make-synth.sh
// generates (data synth --n 400 --seed 1, and --n 100 --seed 2).
func TestBundledDataIsRegenerated(t *testing.T) {
	for _, f := range []struct {
		path string
		n    int
		seed uint64
	}{{"train.jsonl", 400, 1}, {"eval.jsonl", 100, 2}} {
		o := DefaultOptions()
		o.N, o.Seed = f.n, f.seed
		want := writeFile(t, filepath.Join(t.TempDir(), f.path), generate(t, o))
		got, err := os.ReadFile(filepath.Join("../../data/synth", f.path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("data/synth/%s differs from data synth --n %d --seed %d: run scripts/make-synth.sh", f.path, f.n, f.seed)
		}
	}
}
