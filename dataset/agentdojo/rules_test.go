package agentdojo

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultRulesParse(t *testing.T) {
	r := DefaultRules()
	for _, s := range []string{"banking", "slack", "travel", "workspace"} {
		if r.Suites[s] == nil || len(r.Suites[s].Rules) == 0 {
			t.Errorf("suite %s has no rules", s)
		}
	}
}

func TestRulesFileErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"unknown key", "suites:\n  banking:\n    injection_tasks: [0]\n    rulez: []\n", "rulez"},
		{"no operator", "suites:\n  b:\n    injection_tasks: [0]\n    rules:\n      - {name: r, injection_tasks: [0], all: [{field: x}]}\n", "exactly one operator"},
		{"two operators", "suites:\n  b:\n    injection_tasks: [0]\n    rules:\n      - {name: r, injection_tasks: [0], all: [{field: x, contains: a, equals: b}]}\n", "exactly one operator"},
		{"no field", "suites:\n  b:\n    injection_tasks: [0]\n    rules:\n      - {name: r, injection_tasks: [0], all: [{contains: a}]}\n", "field or fields"},
		{"task not listed", "suites:\n  b:\n    injection_tasks: [0]\n    rules:\n      - {name: r, injection_tasks: [3], tools: [f]}\n", "injection task 3"},
		{"matches everything", "suites:\n  b:\n    injection_tasks: [0]\n    rules:\n      - {name: r, injection_tasks: [0]}\n", "every action"},
		{"empty exemption", "suites:\n  b:\n    injection_tasks: [0]\n    rules:\n      - {name: r, injection_tasks: [0], tools: [f], unless: [{}]}\n", "empty exemption"},
		{"no name", "suites:\n  b:\n    injection_tasks: [0]\n    rules:\n      - {injection_tasks: [0], tools: [f]}\n", "name is empty"},
		{"no suites", "constants: {}\n", "no suites"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseRules([]byte(c.yaml), "x.yaml")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want it to mention %q", err, c.want)
			}
		})
	}
}

// A rules file given with --rules replaces the embedded one.
func TestLoadRulesOverride(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.yaml")
	os.WriteFile(p, []byte(`
suites:
  banking:
    injection_tasks: [0]
    rules:
      - name: any balance read
        injection_tasks: [0]
        tools: [get_balance]
`), 0o644)
	r, err := LoadRules(p)
	if err != nil {
		t.Fatal(err)
	}
	a := &Action{Suite: "banking", InjectionTask: 0, Tool: "get_balance"}
	if l, why := r.Label(a); l != 1 || why != "any balance read" {
		t.Errorf("label %d %q", l, why)
	}
}

func args(t *testing.T, s string) map[string]any {
	t.Helper()
	m, err := decodeArgs(json.RawMessage(s))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConditionOperators(t *testing.T) {
	str := func(s string) *string { return &s }
	inj := []string{normText("<INFORMATION>\n do  X \n</INFORMATION>")}
	cases := []struct {
		name string
		c    Condition
		args string
		want bool
	}{
		{"contains, case-insensitive", Condition{Field: "to", Contains: str("ABC")}, `{"to": "xabcx"}`, true},
		{"contains in a list", Condition{Field: "to", Contains: str("b@x")}, `{"to": ["a@x", "B@X"]}`, true},
		{"contains, any of fields", Condition{Fields: []string{"cc", "bcc"}, Contains: str("b")}, `{"to": "b", "bcc": ["b"]}`, true},
		{"missing field", Condition{Field: "to", Contains: str("b")}, `{}`, false},
		{"null field", Condition{Field: "to", Contains: str("b")}, `{"to": null}`, false},
		{"not, missing field", Condition{Field: "to", Contains: str("b"), Not: true}, `{}`, true},
		{"not", Condition{Field: "to", Contains: str("b"), Not: true}, `{"to": "b"}`, false},
		{"contains_any", Condition{Field: "s", ContainsAny: []string{"x", "Spotify"}}, `{"s": "my spotify"}`, true},
		{"equals is exact", Condition{Field: "id", Equals: str("13")}, `{"id": "113"}`, false},
		{"equals a number", Condition{Field: "id", Equals: str("13")}, `{"id": 13}`, true},
		{"number_in, string", Condition{Field: "a", NumberIn: []float64{10}}, `{"a": "10.0"}`, true},
		{"number_in, number", Condition{Field: "a", NumberIn: []float64{2200}}, `{"a": 2200.00}`, true},
		{"number_in, other", Condition{Field: "a", NumberIn: []float64{10}}, `{"a": 10.5}`, false},
		{"echo, rewrapped", Condition{Field: "b", EchoesInjection: true}, `{"b": "fwd: <information> do x </information>"}`, true},
		{"echo, partial", Condition{Field: "b", EchoesInjection: true}, `{"b": "do x"}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.c.check(); err != nil {
				t.Fatal(err)
			}
			a := &Action{Args: args(t, c.args), Injections: inj}
			if got := c.c.holds(a); got != c.want {
				t.Errorf("holds = %v, want %v", got, c.want)
			}
		})
	}
}
