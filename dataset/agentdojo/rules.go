package agentdojo

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// defaultRules is rules/agentdojo.yaml: the labeling rules of the data README.
//
//go:embed rules/agentdojo.yaml
var defaultRules []byte

// Rules are the labeling rules of AgentDojo actions, read from a YAML file
// (rules/agentdojo.yaml documents the format). Label applies them.
type Rules struct {
	// Constants holds values the file reuses through YAML anchors; unused here.
	Constants map[string]any `yaml:"constants"`
	// Suites maps a suite name to its injection tasks and rules.
	Suites map[string]*SuiteRules `yaml:"suites"`
}

// SuiteRules are one suite's rules.
type SuiteRules struct {
	InjectionTasks []int  `yaml:"injection_tasks"` // every injection task K of the suite
	Rules          []Rule `yaml:"rules"`           // an action is 1 when one of these matches
}

// Rule labels an action 1 when the run's injection task is one of
// InjectionTasks, Match matches, and no exemption in Unless matches.
type Rule struct {
	Name           string `yaml:"name"`
	InjectionTasks []int  `yaml:"injection_tasks"`
	Match          `yaml:",inline"`
	Unless         []Match `yaml:"unless"`
}

// Match is a conjunction: tool name, user task, conditions on arguments, and
// whether an earlier action of the run is already labeled 1. Empty parts match
// anything.
type Match struct {
	Tools         []string    `yaml:"tools"`
	UserTasks     []int       `yaml:"user_tasks"`
	All           []Condition `yaml:"all"`
	AfterPositive bool        `yaml:"after_positive"`
}

// Condition tests argument fields of an action with exactly one operator.
type Condition struct {
	Field           string    `yaml:"field"`  // the argument to look at
	Fields          []string  `yaml:"fields"` // or several: any of them may match
	Contains        *string   `yaml:"contains"`
	ContainsAny     []string  `yaml:"contains_any"`
	Equals          *string   `yaml:"equals"`
	NumberIn        []float64 `yaml:"number_in"`
	EchoesInjection bool      `yaml:"echoes_injection"`
	Not             bool      `yaml:"not"` // negate; a missing field then satisfies the condition
}

// DefaultRules returns the rules embedded in the binary (rules/agentdojo.yaml).
func DefaultRules() *Rules {
	r, err := ParseRules(defaultRules, "rules/agentdojo.yaml")
	if err != nil {
		panic(err) // the embedded file is tested
	}
	return r
}

// LoadRules reads a rules file.
func LoadRules(path string) (*Rules, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseRules(b, path)
}

// ParseRules decodes and checks a rules file. Unknown keys are errors.
func ParseRules(b []byte, name string) (*Rules, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var r Rules
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("rules %s: %w", name, err)
	}
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("rules %s: %w", name, err)
	}
	return &r, nil
}

func (r *Rules) check() error {
	if len(r.Suites) == 0 {
		return errors.New("no suites")
	}
	for sname, s := range r.Suites {
		if s == nil || len(s.InjectionTasks) == 0 {
			return fmt.Errorf("suites.%s: injection_tasks is empty", sname)
		}
		for i := range s.Rules {
			ru := &s.Rules[i]
			at := fmt.Sprintf("suites.%s.rules[%d]", sname, i)
			if ru.Name == "" {
				return fmt.Errorf("%s: name is empty", at)
			}
			at += fmt.Sprintf(" (%s)", ru.Name)
			if len(ru.InjectionTasks) == 0 {
				return fmt.Errorf("%s: injection_tasks is empty", at)
			}
			for _, k := range ru.InjectionTasks {
				if !slices.Contains(s.InjectionTasks, k) {
					return fmt.Errorf("%s: injection task %d is not in suites.%s.injection_tasks", at, k, sname)
				}
			}
			if len(ru.Tools) == 0 && len(ru.All) == 0 && !ru.AfterPositive {
				return fmt.Errorf("%s: needs tools, all or after_positive (it would match every action)", at)
			}
			if err := ru.Match.check(); err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
			for j := range ru.Unless {
				u := &ru.Unless[j]
				if len(u.Tools) == 0 && len(u.UserTasks) == 0 && len(u.All) == 0 && !u.AfterPositive {
					return fmt.Errorf("%s.unless[%d]: empty exemption (it would exempt everything)", at, j)
				}
				if err := u.check(); err != nil {
					return fmt.Errorf("%s.unless[%d]: %w", at, j, err)
				}
			}
		}
	}
	return nil
}

func (m *Match) check() error {
	for i := range m.All {
		if err := m.All[i].check(); err != nil {
			return fmt.Errorf("all[%d]: %w", i, err)
		}
	}
	return nil
}

func (c *Condition) check() error {
	if (c.Field == "") == (len(c.Fields) == 0) {
		return errors.New("give exactly one of field or fields")
	}
	ops := 0
	if c.Contains != nil {
		ops++
		if *c.Contains == "" {
			return errors.New("contains is empty")
		}
	}
	if c.ContainsAny != nil {
		ops++
		if len(c.ContainsAny) == 0 || slices.Contains(c.ContainsAny, "") {
			return errors.New("contains_any is empty or has an empty string")
		}
	}
	if c.Equals != nil {
		ops++
	}
	if c.NumberIn != nil {
		ops++
		if len(c.NumberIn) == 0 {
			return errors.New("number_in is empty")
		}
	}
	if c.EchoesInjection {
		ops++
	}
	if ops != 1 {
		return fmt.Errorf("want exactly one operator (contains, contains_any, equals, number_in, echoes_injection), got %d", ops)
	}
	return nil
}

// Action is what a rule sees of one action and its run.
type Action struct {
	Suite           string         // the run's suite
	UserTask        int            // K of user_task_K
	InjectionTask   int            // K of injection_task_K; ignored when Benign
	Benign          bool           // the run has no injection task
	Tool            string         // the tool's name
	Args            map[string]any // the arguments (numbers as json.Number)
	EarlierPositive bool           // an earlier action of the run is labeled 1
	Injections      []string       // the run's injected texts, normalised by normText
}

// Label returns 1 and the name of the first matching rule when a is
// malicious, else 0 and "".
func (r *Rules) Label(a *Action) (int, string) {
	if a.Benign {
		return 0, ""
	}
	s := r.Suites[a.Suite]
	if s == nil {
		return 0, ""
	}
	for i := range s.Rules {
		ru := &s.Rules[i]
		if !slices.Contains(ru.InjectionTasks, a.InjectionTask) || !ru.Match.matches(a) {
			continue
		}
		exempt := false
		for j := range ru.Unless {
			if ru.Unless[j].matches(a) {
				exempt = true
				break
			}
		}
		if !exempt {
			return 1, ru.Name
		}
	}
	return 0, ""
}

// CheckRun reports an error when the rules cannot label runs of this suite and
// injection task (unknown suite, or an injection task the suite does not list).
func (r *Rules) CheckRun(suite string, injectionTask int, benign bool) error {
	s := r.Suites[suite]
	if s == nil {
		return fmt.Errorf("the rules have no suite %q", suite)
	}
	if !benign && !slices.Contains(s.InjectionTasks, injectionTask) {
		return fmt.Errorf("the rules of suite %q do not list injection task %d", suite, injectionTask)
	}
	return nil
}

func (m *Match) matches(a *Action) bool {
	if len(m.Tools) > 0 && !slices.Contains(m.Tools, a.Tool) {
		return false
	}
	if len(m.UserTasks) > 0 && !slices.Contains(m.UserTasks, a.UserTask) {
		return false
	}
	if m.AfterPositive && !a.EarlierPositive {
		return false
	}
	for i := range m.All {
		if !m.All[i].holds(a) {
			return false
		}
	}
	return true
}

func (c *Condition) holds(a *Action) bool {
	fields := c.Fields
	if c.Field != "" {
		fields = []string{c.Field}
	}
	hit := false
	for _, f := range fields {
		v, ok := a.Args[f]
		if !ok {
			continue
		}
		for _, s := range textValues(v) {
			if c.test(s, a) {
				hit = true
				break
			}
		}
		if hit {
			break
		}
	}
	return hit != c.Not
}

// test applies the operator to one text value.
func (c *Condition) test(s string, a *Action) bool {
	switch {
	case c.Contains != nil:
		return containsFold(s, *c.Contains)
	case c.ContainsAny != nil:
		for _, x := range c.ContainsAny {
			if containsFold(s, x) {
				return true
			}
		}
		return false
	case c.Equals != nil:
		return strings.EqualFold(strings.TrimSpace(s), strings.TrimSpace(*c.Equals))
	case c.NumberIn != nil:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		return err == nil && slices.Contains(c.NumberIn, f)
	case c.EchoesInjection:
		n := normText(s)
		for _, inj := range a.Injections {
			if inj != "" && strings.Contains(n, inj) {
				return true
			}
		}
		return false
	}
	return false
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

// textValues returns the texts a JSON value offers to a condition: a string
// itself, a number or boolean as its JSON text, each element of a list, and
// an object as its JSON text. null offers nothing.
func textValues(v any) []string {
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		return []string{x}
	case json.Number:
		return []string{x.String()}
	case bool:
		return []string{strconv.FormatBool(x)}
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, textValues(e)...)
		}
		return out
	default:
		b, _ := json.Marshal(x)
		return []string{string(b)}
	}
}

// normText lower-cases s and collapses runs of whitespace to one space, for
// "verbatim echo" comparisons that survive re-wrapping.
func normText(s string) string {
	return strings.ToLower(strings.Join(strings.Fields(s), " "))
}
