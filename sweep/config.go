// Package sweep runs a grid of mageguard configurations (γ × λ, or any
// config keys): it lays out the points (a Schedule), runs each one through a
// Runner (which trains and evaluates into the point's folder), skips the
// points already finished so that a killed sweep resumes, writes the
// schedule for a cluster (`sweep --plan`: plan.json and plan.sh, one
// command per point), and collects the finished points' report.json files
// into summary.csv, summary.md and heatmaps. (Package plan, which sizes a
// configuration's device memory, is unrelated.)
//
// Layout of a sweep's output folder:
//
//	OUT/plan.json, OUT/plan.sh        --plan: the points and one command per point
//	OUT/<point name>/                 one folder per point, e.g. gamma=0.25,lambda=0.5
//	OUT/<point name>/report.json      written by the runner (eval.WriteReport)
//	OUT/<point name>/DONE             written by the sweep after the runner succeeded
//	OUT/summary.csv, OUT/summary.md   a row per point
//	OUT/heatmap_*.png                 sweep.heatmaps (default ASR, BU, token cost) over the first two swept keys;
//	                                  with more keys, heatmap_*_sd.png: their spread over the others
package sweep

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Config is the `sweep` section of a configuration (see configs/sweep.yaml).
type Config struct {
	// Grid maps dotted config keys to the list of values each takes; the
	// sweep's points are the Cartesian product, the first key varying slowest.
	Grid Grid `yaml:"grid"`
	// BaseConfig is the config file every point starts from, before its
	// grid overrides ("" = the sweep's own config file). A relative path is
	// relative to the folder of the sweep's config file, like a config
	// file's `base:` (ResolveBaseConfig).
	BaseConfig string `yaml:"base_config"`
	// EvalData is the held-out trajectory file every point is evaluated on
	// ("" = left to the runner, e.g. the base config's own eval data).
	EvalData string `yaml:"eval_data"`
	// Heatmaps are the report.json metrics (top-level keys, the synth
	// section's figures included) drawn as heatmaps over the first two
	// swept keys and shown in summary.md's tables; with more than two keys,
	// each also gets a heatmap of its spread over the others (e.g. seeds)
	// and a table of mean ± spread per cell. Default: asr, bu,
	// token_cost_online.
	Heatmaps []string `yaml:"heatmaps"`
}

// DefaultConfig returns the paper's sensitivity grid: γ ∈ {0, 0.25, 0.5,
// 0.75, 0.99} × λ ∈ {0, 0.5, 1, 2}.
func DefaultConfig() Config {
	return Config{Grid: Grid{
		{Key: "rewards.gamma", Values: []string{"0", "0.25", "0.5", "0.75", "0.99"}},
		{Key: "rewards.lambda", Values: []string{"0", "0.5", "1", "2"}},
	}, Heatmaps: []string{"asr", "bu", "token_cost_online"}}
}

// Validate checks the grid: at least one key, each a dotted key listed once
// with a non-empty list of distinct values.
func (c *Config) Validate() error {
	if len(c.Grid) == 0 {
		return fmt.Errorf("grid must list at least one key")
	}
	for _, m := range c.Heatmaps {
		if _, ok := metricKinds()[m]; !ok {
			return fmt.Errorf("heatmaps: %q is not a metric of report.json (one of %s)", m, strings.Join(metricOrder(), ", "))
		}
	}
	seen := map[string]bool{}
	for _, a := range c.Grid {
		if err := checkKey(a.Key); err != nil {
			return fmt.Errorf("grid: key %q: %w", a.Key, err)
		}
		if seen[a.Key] {
			return fmt.Errorf("grid: key %q listed twice", a.Key)
		}
		seen[a.Key] = true
		if len(a.Values) == 0 {
			return fmt.Errorf("grid.%s must list at least one value", a.Key)
		}
		vals := map[string]bool{}
		for _, v := range a.Values {
			if vals[v] {
				return fmt.Errorf("grid.%s: value %s listed twice", a.Key, v)
			}
			vals[v] = true
		}
	}
	return nil
}

// checkKey accepts dotted keys of non-empty parts without spaces or '='.
func checkKey(k string) error {
	if k == "" {
		return fmt.Errorf("empty")
	}
	for _, p := range strings.Split(k, ".") {
		if p == "" {
			return fmt.Errorf("empty part in a dotted key")
		}
		if strings.ContainsAny(p, " \t\n=") {
			return fmt.Errorf("want a dotted key like rewards.gamma")
		}
	}
	return nil
}

// Axis is one swept key and its values, each the YAML text a
// `--set key=value` override takes (e.g. `0.25`, `"abc"`, `[a, b]`).
type Axis struct {
	Key    string
	Values []string
}

// Grid is the ordered list of swept keys. In YAML it is a mapping from
// dotted keys to lists of values, in order; nested mappings are flattened
// (`rewards: {gamma: [0, 0.5]}` is `rewards.gamma: [0, 0.5]`), so a
// `--set sweep.grid.rewards.gamma=[0,0.5]` override works too (it replaces
// the whole grid, as --set does for every list or mapping).
type Grid []Axis

// UnmarshalYAML reads a grid from a YAML mapping, keeping the key order.
func (g *Grid) UnmarshalYAML(n *yaml.Node) error {
	var out Grid
	if err := flatten(n, "", &out); err != nil {
		return err
	}
	*g = out
	return nil
}

func flatten(n *yaml.Node, prefix string, out *Grid) error {
	if n.Kind != yaml.MappingNode {
		if prefix == "" {
			return fmt.Errorf("%sgrid: want a mapping from config keys to lists of values", at(n))
		}
		return fmt.Errorf("%sgrid.%s: want a list of values or a mapping", at(n), prefix)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		if prefix != "" {
			key = prefix + "." + key
		}
		switch v.Kind {
		case yaml.MappingNode:
			if err := flatten(v, key, out); err != nil {
				return err
			}
		case yaml.SequenceNode:
			a := Axis{Key: key}
			for _, item := range v.Content {
				text, err := yamlText(item)
				if err != nil {
					return fmt.Errorf("%sgrid.%s: %w", at(item), key, err)
				}
				a.Values = append(a.Values, text)
			}
			*out = append(*out, a)
		default:
			return fmt.Errorf("%sgrid.%s: want a list of values, got %q", at(v), key, v.Value)
		}
	}
	return nil
}

// at returns "line N: " for a node read from a file, "" for one from --set.
func at(n *yaml.Node) string {
	if n.Line == 0 {
		return ""
	}
	return fmt.Sprintf("line %d: ", n.Line)
}

// yamlText renders a value node as the one-line YAML text --set parses back
// to the same value (flow style for lists and mappings, quotes kept).
func yamlText(n *yaml.Node) (string, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	c := *n
	setFlow(&c)
	data, err := yaml.Marshal(&c)
	if err != nil {
		return "", err
	}
	s := strings.TrimSuffix(string(data), "\n")
	if strings.Contains(s, "\n") {
		return "", fmt.Errorf("value %q does not fit on one line", s)
	}
	return s, nil
}

func setFlow(n *yaml.Node) {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	if n.Kind == yaml.SequenceNode || n.Kind == yaml.MappingNode {
		n.Style = yaml.FlowStyle
	}
	for i, c := range n.Content {
		cc := *c
		setFlow(&cc)
		n.Content[i] = &cc
	}
}

// MarshalYAML writes the grid as a mapping of keys to flow lists, in order.
func (g Grid) MarshalYAML() (any, error) {
	m := &yaml.Node{Kind: yaml.MappingNode}
	for _, a := range g {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, v := range a.Values {
			var doc yaml.Node
			if err := yaml.Unmarshal([]byte(v), &doc); err != nil || len(doc.Content) == 0 {
				return nil, fmt.Errorf("grid.%s: bad value %q", a.Key, v)
			}
			seq.Content = append(seq.Content, doc.Content[0])
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: a.Key}, seq)
	}
	return m, nil
}

// display is a value as shown in folder names and tables: a scalar's text
// without quotes, a list or mapping as its flow YAML.
func display(v string) string {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(v), &doc); err == nil && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.ScalarNode {
		return doc.Content[0].Value
	}
	return v
}
