package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

type inner struct {
	Gamma float64  `yaml:"gamma"`
	Steps int      `yaml:"steps"`
	Name  string   `yaml:"name"`
	Keys  []string `yaml:"keys"`
}

func (c *inner) Validate() error {
	if c.Gamma < 0 || c.Gamma >= 1 {
		return errors.New("gamma must be in [0, 1)")
	}
	return nil
}

type root struct {
	A inner `yaml:"a"`
	B struct {
		Flag bool `yaml:"flag"`
	} `yaml:"b"`
}

func defaults() *root {
	r := &root{}
	r.A = inner{Gamma: 0.5, Steps: 10, Name: "x", Keys: []string{"k"}}
	return r
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedence(t *testing.T) {
	r := defaults()
	p := writeFile(t, "a:\n  gamma: 0.25\n  steps: 3\n")
	if err := LoadFile(p, r); err != nil {
		t.Fatal(err)
	}
	if err := Set(r, "a.steps=7"); err != nil {
		t.Fatal(err)
	}
	if err := Set(r, "b.flag=true"); err != nil {
		t.Fatal(err)
	}
	if err := Set(r, "a.keys=[p, q]"); err != nil {
		t.Fatal(err)
	}
	// file beats default; --set beats file; untouched keys keep defaults.
	if r.A.Gamma != 0.25 || r.A.Steps != 7 || r.A.Name != "x" || !r.B.Flag {
		t.Fatalf("got %+v", r)
	}
	if strings.Join(r.A.Keys, ",") != "p,q" {
		t.Fatalf("keys: got %v, want [p q] (lists replace, not merge)", r.A.Keys)
	}
}

func TestErrorsNameTheKey(t *testing.T) {
	cases := []struct {
		name, file, set, want string
	}{
		{"unknown key in file", "a:\n  gama: 0.1\n", "", `line 2: unknown key "a.gama" (did you mean "a.gamma"?)`},
		{"key in the wrong section", "b:\n  steps: 3\n", "", `line 2: unknown key "b.steps" (did you mean "a.steps"?)`},
		{"nothing close", "a:\n  zzzzzz: 1\n", "", `line 2: unknown key "a.zzzzzz"`},
		{"unknown section in file", "zz: 1\n", "", `line 1: unknown key "zz"`},
		{"bad value in file", "a:\n  steps: many\n", "", `line 2: key "a.steps": bad value "many": want an integer`},
		{"section given a scalar", "a: 3\n", "", `key "a" is a section`},
		{"duplicate key in file", "a:\n  gamma: 0.1\n  steps: 2\n  gamma: 0.2\n", "", `line 4: key "a.gamma" is given twice (first on line 2)`},
		{"duplicate section in file", "a:\n  gamma: 0.1\nb:\n  flag: true\na:\n  steps: 2\n", "", `line 5: key "a" is given twice (first on line 1)`},
		{"unknown key in --set", "", "a.nope=1", `--set a.nope: unknown key "a.nope"`},
		{"misspelt key in --set", "", "a.stesp=1", `--set a.stesp: unknown key "a.stesp" (did you mean "a.steps"?)`},
		{"bad value in --set", "", "a.gamma=abc", `--set a.gamma: key "a.gamma": bad value "abc": want a number`},
		{"fraction for an integer in --set", "", "a.steps=1.5", `--set a.steps: key "a.steps": bad value "1.5": want an integer`},
		{"fraction for an integer in file", "a:\n  steps: 2.5\n", "", `line 2: key "a.steps": bad value "2.5": want an integer`},
		{"list for an integer in --set", "", "a.steps=[1, 2]", `--set a.steps: key "a.steps": bad value [1, 2]: want an integer`},
		{"word for a bool in --set", "", "b.flag=maybe", `--set b.flag: key "b.flag": bad value "maybe": want true or false`},
		{"mapping for a list in --set", "", "a.keys={x: 1}", `--set a.keys: key "a.keys": bad value {x: 1}: want a list`},
		{"duplicate key in --set", "", "a={gamma: 0.1, gamma: 0.2}", `--set a: key "a.gamma" is given twice`},
		{"no equals", "", "a.gamma", `want key=value`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := defaults()
			var err error
			if c.file != "" {
				err = LoadFile(writeFile(t, c.file), r)
			} else {
				err = Set(r, c.set)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
			// yaml.v3's own wording ("line 0:", "cannot unmarshal !!str") never leaks out.
			if msg := err.Error(); strings.Contains(msg, "line 0") || strings.Contains(msg, "unmarshal") || strings.Count(msg, "line ") > 2 {
				t.Fatalf("error %q is not clean", msg)
			}
			if r.A.Gamma != 0.5 || r.A.Steps != 10 {
				t.Fatalf("a failed load changed values: %+v", r.A)
			}
		})
	}
}

// An integral float (1e3) still sets an integer key, as YAML allows.
func TestIntegralFloatSetsInteger(t *testing.T) {
	r := defaults()
	if err := Set(r, "a.steps=1e3"); err != nil || r.A.Steps != 1000 {
		t.Fatalf("a.steps=1e3: %v, steps %d", err, r.A.Steps)
	}
}

func TestValidateNamesSection(t *testing.T) {
	r := defaults()
	if err := Set(r, "a.gamma=1.5"); err != nil {
		t.Fatal(err)
	}
	err := Validate(r)
	if err == nil || err.Error() != "config: a.gamma must be in [0, 1)" {
		t.Fatalf("got %v", err)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	r := defaults()
	r.A.Steps = 42
	out, err := Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	back := &root{}
	if err := LoadFile(writeFile(t, string(out)), back); err != nil {
		t.Fatal(err)
	}
	if back.A.Steps != 42 || back.A.Gamma != 0.5 || back.A.Name != "x" {
		t.Fatalf("round trip: %+v", back)
	}
}

func TestBaseFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("base.yaml", "a:\n  gamma: 0.25\n  steps: 3\n")
	child := write("child.yaml", "base: base.yaml\na:\n  steps: 4\n")
	r := defaults()
	if err := LoadFile(child, r); err != nil {
		t.Fatal(err)
	}
	// The base sets gamma and steps; the child overrides steps; name stays default.
	if r.A.Gamma != 0.25 || r.A.Steps != 4 || r.A.Name != "x" {
		t.Fatalf("got %+v", r.A)
	}
	cycle := write("cycle.yaml", "base: cycle.yaml\n")
	if err := LoadFile(cycle, defaults()); err == nil || !strings.Contains(err.Error(), "nested base files") {
		t.Fatalf("a base cycle gave %v", err)
	}
	bad := write("bad.yaml", "base: missing.yaml\n")
	if err := LoadFile(bad, defaults()); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("a missing base gave %v", err)
	}
}

// TestClosestKey pins the suggestion rule: the same last part in another
// section first, else the nearest key within a third of the key's length.
func TestClosestKey(t *testing.T) {
	known := knownKeys(reflect.TypeOf(root{}), "")
	if got := strings.Join(known, " "); got != "a a.gamma a.steps a.name a.keys b b.flag" {
		t.Fatalf("knownKeys = %q", got)
	}
	cases := map[string]string{
		"a.gama":   "a.gamma", // one deletion
		"b.steps":  "a.steps", // the right key in the wrong section
		"a.flag":   "b.flag",
		"a.zzzzzz": "",  // nothing close
		"c":        "a", // distance 1 ≤ 2
		"qqqqqqqq": "",
	}
	for key, want := range cases {
		if got := closestKey(known, key); got != want {
			t.Errorf("closestKey(%q) = %q, want %q", key, got, want)
		}
	}
}
