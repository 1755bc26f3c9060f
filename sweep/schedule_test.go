package sweep

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestPlanOrderAndNames(t *testing.T) {
	p, err := NewSchedule(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Points) != 20 {
		t.Fatalf("%d points, want 5 × 4 = 20", len(p.Points))
	}
	// The first key varies slowest: point 4k+j has gamma value k and lambda value j.
	cases := []struct {
		i    int
		name string
		sets []string
	}{
		{0, "gamma=0,lambda=0", []string{"rewards.gamma=0", "rewards.lambda=0"}},
		{1, "gamma=0,lambda=0.5", []string{"rewards.gamma=0", "rewards.lambda=0.5"}},
		{4, "gamma=0.25,lambda=0", []string{"rewards.gamma=0.25", "rewards.lambda=0"}},
		{19, "gamma=0.99,lambda=2", []string{"rewards.gamma=0.99", "rewards.lambda=2"}},
	}
	for _, c := range cases {
		pt := p.Points[c.i]
		if pt.Index != c.i || pt.Name != c.name || !reflect.DeepEqual(pt.Sets, c.sets) {
			t.Errorf("point %d = %+v, want name %q sets %v", c.i, pt, c.name, c.sets)
		}
	}
	if got := p.Label(p.Points[6]); got != "gamma=0.25, lambda=1" {
		t.Errorf("label %q", got)
	}
	if !reflect.DeepEqual(p.ShortKeys, []string{"gamma", "lambda"}) {
		t.Errorf("short keys %v", p.ShortKeys)
	}
	if _, err := p.Point(20); err == nil || !strings.Contains(err.Error(), "no point 20: the plan has points 0..19") {
		t.Errorf("Point(20): %v", err)
	}
}

func TestShortKeys(t *testing.T) {
	cases := []struct{ keys, want []string }{
		{[]string{"rewards.gamma"}, []string{"gamma"}},
		{[]string{"grpo.lr", "model.lr", "rewards.gamma"}, []string{"grpo.lr", "model.lr", "gamma"}},
		{[]string{"a.b.c", "x.b.c", "y.c"}, []string{"a.b.c", "x.b.c", "y.c"}},
		{[]string{"c", "a.c"}, []string{"c", "a.c"}},
	}
	for _, c := range cases {
		if got := shortKeys(c.keys); !reflect.DeepEqual(got, c.want) {
			t.Errorf("shortKeys(%v) = %v, want %v", c.keys, got, c.want)
		}
	}
}

func TestPlanNamesAreSafeAndUnique(t *testing.T) {
	long := strings.Repeat("x", 200)
	c := Config{Grid: Grid{
		{"data.path", []string{`"a/b"`, `"a b"`, `"a,b=c"`, `"` + long + `1"`, `"` + long + `2"`}},
	}}
	p, err := NewSchedule(c)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, pt := range p.Points {
		if seen[pt.Name] {
			t.Errorf("name %q twice", pt.Name)
		}
		seen[pt.Name] = true
		if len(pt.Name) > maxName+4 || strings.ContainsAny(pt.Name, "/ \"'") {
			t.Errorf("unsafe name %q", pt.Name)
		}
	}
	// "a/b" and "a b" both sanitise to a_b: told apart by their index.
	if p.Points[0].Name != "path=a_b-p0" || p.Points[1].Name != "path=a_b-p1" || p.Points[2].Name != "path=a_b_c" {
		t.Errorf("names %q %q %q", p.Points[0].Name, p.Points[1].Name, p.Points[2].Name)
	}
	// The override keeps the quotes: --set gets the same string back.
	if p.Points[1].Sets[0] != `data.path="a b"` {
		t.Errorf("sets %v", p.Points[1].Sets)
	}
}

func TestWriteSchedule(t *testing.T) {
	c := Config{Grid: Grid{{"rewards.gamma", []string{"0", "0.5"}}, {"rewards.lambda", []string{"1", "2"}}}, EvalData: "e.jsonl"}
	p, err := NewSchedule(c)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The commands run in work (plan.sh changes into it), wherever plan.sh
	// is started from; the fake command shows where it ran.
	work := filepath.Join(t.TempDir(), "work dir")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := []string{"sh", "-c", `echo "$(basename "$PWD"):" "$@"`, "fake", "sweep", "--config", "my configs/s.yaml", "--out", "o"}
	if err := WriteSchedule(dir, p, "relative", cmd); err == nil || !strings.Contains(err.Error(), "not absolute") {
		t.Errorf("a relative working directory: %v", err)
	}
	if err := WriteSchedule(dir, p, work, cmd); err != nil {
		t.Fatal(err)
	}
	var back Schedule
	data, _ := os.ReadFile(filepath.Join(dir, PlanJSON))
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Points) != 4 || back.EvalData != "e.jsonl" || back.Points[3].Name != "gamma=0.5,lambda=2" || back.Dir != work {
		t.Fatalf("plan.json: %s", data)
	}
	wantCmd := append(append([]string{}, cmd...), "--point", "2")
	if !reflect.DeepEqual(back.Points[2].Command, wantCmd) {
		t.Errorf("command %v, want %v", back.Points[2].Command, wantCmd)
	}
	if p.Points[2].Command != nil {
		t.Error("WriteSchedule changed the schedule")
	}
	sh := filepath.Join(dir, PlanShell)
	if fi, _ := os.Stat(sh); fi.Mode().Perm() != 0o755 {
		t.Errorf("plan.sh mode %v", fi.Mode().Perm())
	}
	// Run the script: the point number comes from the argument or the scheduler's variable.
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"2"}, "", "work dir: sweep --config my configs/s.yaml --out o --point 2\n"},
		{nil, "SLURM_ARRAY_TASK_ID=1", "work dir: sweep --config my configs/s.yaml --out o --point 1\n"},
		{nil, "JOB_COMPLETION_INDEX=3", "work dir: sweep --config my configs/s.yaml --out o --point 3\n"},
	} {
		run := exec.Command("sh", append([]string{sh}, c.args...)...)
		run.Dir = t.TempDir() // started from elsewhere
		run.Env = append(os.Environ(), c.env)
		out, err := run.Output()
		if err != nil || string(out) != c.want {
			t.Errorf("sh plan.sh %v (%s): %q, %v; want %q", c.args, c.env, out, err, c.want)
		}
	}
	run := exec.Command("sh", sh, "4")
	if out, err := run.CombinedOutput(); err == nil || !strings.Contains(string(out), "want a point number in 0..3, got '4'") {
		t.Errorf("sh plan.sh 4: %q, %v", out, err)
	}
	script, _ := os.ReadFile(sh)
	if !strings.Contains(string(script), "\ncd '"+work+"'\n") ||
		!strings.Contains(string(script), "0) exec sh -c 'echo \"$(basename \"$PWD\"):\" \"$@\"' fake sweep --config 'my configs/s.yaml' --out o --point 0 ;; # gamma=0,lambda=1\n") {
		t.Errorf("plan.sh:\n%s", script)
	}
}

// sweep.base_config is relative to the sweep's config file, like base:.
func TestResolveBaseConfig(t *testing.T) {
	cases := []struct{ base, file, want string }{
		{"default.yaml", "configs/sweep.yaml", "configs/default.yaml"},
		{"../other/b.yaml", "/a/configs/s.yaml", "/a/other/b.yaml"},
		{"/abs/b.yaml", "configs/s.yaml", "/abs/b.yaml"},
		{"", "configs/s.yaml", ""},     // the sweep's own file
		{"b.yaml", "", "b.yaml"},       // no config file: the working directory
		{"b.yaml", "s.yaml", "b.yaml"}, // a config file in the working directory
	}
	for _, c := range cases {
		if got := ResolveBaseConfig(c.base, c.file); got != c.want {
			t.Errorf("ResolveBaseConfig(%q, %q) = %q, want %q", c.base, c.file, got, c.want)
		}
	}
}

func TestShellQuote(t *testing.T) {
	cases := map[string]string{
		"plain":          "plain",
		"a=b,c.d/e":      "a=b,c.d/e",
		"":               "''",
		"two words":      "'two words'",
		"it's":           `'it'\''s'`,
		"$HOME":          "'$HOME'",
		`rewards.x="a"`:  `'rewards.x="a"'`,
		"sweep.grid=[1]": "'sweep.grid=[1]'",
	}
	for in, want := range cases {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
