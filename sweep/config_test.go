package sweep

import (
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func parse(t *testing.T, text string) (Config, error) {
	t.Helper()
	var doc struct {
		Sweep Config `yaml:"sweep"`
	}
	doc.Sweep = DefaultConfig()
	err := yaml.Unmarshal([]byte(text), &doc)
	return doc.Sweep, err
}

func TestGridYAML(t *testing.T) {
	c, err := parse(t, `
sweep:
  grid:
    rewards.lambda: [2, 0.5]   # order as written, not sorted
    rewards:
      gamma: [0, 0.99]
    grpo.notes: ["a b", plain, [x, y]]
  eval_data: e.jsonl
`)
	if err != nil {
		t.Fatal(err)
	}
	want := Grid{
		{"rewards.lambda", []string{"2", "0.5"}},
		{"rewards.gamma", []string{"0", "0.99"}},
		{"grpo.notes", []string{`"a b"`, "plain", "[x, y]"}},
	}
	if !reflect.DeepEqual(c.Grid, want) || c.EvalData != "e.jsonl" {
		t.Fatalf("got %#v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// Marshal and parse back: the same grid.
	out, err := yaml.Marshal(struct {
		Sweep Config `yaml:"sweep"`
	}{c})
	if err != nil {
		t.Fatal(err)
	}
	back, err := parse(t, string(out))
	if err != nil || !reflect.DeepEqual(back.Grid, want) {
		t.Fatalf("round trip via\n%s\ngot %#v, %v", out, back.Grid, err)
	}
	if !strings.Contains(string(out), "rewards.lambda: [2, 0.5]") {
		t.Errorf("marshalled grid:\n%s", out)
	}
}

func TestDefaultConfigIsThePaperGrid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Grid{
		{"rewards.gamma", []string{"0", "0.25", "0.5", "0.75", "0.99"}},
		{"rewards.lambda", []string{"0", "0.5", "1", "2"}},
	}
	if !reflect.DeepEqual(c.Grid, want) {
		t.Fatalf("got %v", c.Grid)
	}
}

func TestGridErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"scalar value", "sweep:\n  grid:\n    rewards.gamma: 0.5\n", `line 3: grid.rewards.gamma: want a list of values, got "0.5"`},
		{"grid not a mapping", "sweep:\n  grid: [1, 2]\n", "line 2: grid: want a mapping"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse(t, c.yaml)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
	invalid := []struct {
		name, yaml, want string
	}{
		{"empty grid", "sweep:\n  grid: {}\n", "grid must list at least one key"},
		{"empty values", "sweep:\n  grid:\n    a.b: []\n", "grid.a.b must list at least one value"},
		{"duplicate value", "sweep:\n  grid:\n    a.b: [1, 2, 1]\n", "grid.a.b: value 1 listed twice"},
		{"duplicate key", "sweep:\n  grid:\n    a.b: [1]\n    a: {b: [2]}\n", `grid: key "a.b" listed twice`},
		{"bad key", "sweep:\n  grid:\n    a..b: [1]\n", `grid: key "a..b": empty part`},
	}
	for _, c := range invalid {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parse(t, c.yaml)
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.Validate()
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("error %v, want prefix %q", err, c.want)
			}
		})
	}
}
