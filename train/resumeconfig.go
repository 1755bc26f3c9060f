package train

// What a resume may change. A run records its resolved configuration in
// Out/config.yaml; `train --resume` compares the configuration it is given
// with that record before it loads anything. A key that changes what the
// checkpoint is — the model's architecture, tokenizer, dtype, path or
// seed, the dtypes of checkpoints and master weights — is refused, naming
// the key: the checkpoint would be trained as it is while config.yaml said
// otherwise. Any other change (learning rate, γ, steps, …) is allowed and
// said: in the log, and as "config_changed" in the first metrics.jsonl line
// the resumed run writes.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// ConfigChange is a configuration key whose value differs from the one
// recorded (nil: the key was not there).
type ConfigChange struct {
	Key      string
	Was, Now any
}

func (c ConfigChange) String() string {
	return fmt.Sprintf("%s %s → %s", c.Key, showValue(c.Was), showValue(c.Now))
}

func showValue(v any) string {
	if v == nil {
		return "(not set)"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// runtimeModelKeys are the keys of the model section that say how the
// model runs, not what it is: a resume may change them.
var runtimeModelKeys = []string{"backend", "plugin", "parallelism", "auto_install", "simplego_ops", "gc_percent",
	"memory_limit_mb", "ops_sequential", "xla_memory_fraction", "xla_preallocate", "xla_allocator",
	"lm_head_chunk", "attention_block", "allow_non_finite"}

// checkpointKey reports whether a change of key changes what the
// checkpoint is: every key of the model section but runtimeModelKeys, and
// the dtypes checkpoints and master weights are kept in.
func checkpointKey(key string) bool {
	if name, ok := strings.CutPrefix(key, "model."); ok {
		return !slices.Contains(runtimeModelKeys, name)
	}
	return key == "train.checkpoint_dtype" || key == "grpo.master_dtype"
}

// compareResumeConfig compares a run's recorded configuration (YAML) with
// the one it is resumed with and returns the changes, sorted by key; a
// change of a checkpoint key (one recorded, now different) is an error
// naming every such key.
func compareResumeConfig(recorded, now []byte) ([]ConfigChange, error) {
	was, err := flatConfig(recorded)
	if err != nil {
		return nil, fmt.Errorf("the recorded configuration: %w", err)
	}
	is, err := flatConfig(now)
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for k := range was {
		keys[k] = true
	}
	for k := range is {
		keys[k] = true
	}
	var changes, refused []ConfigChange
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		w, inWas := was[k]
		n := is[k]
		if reflect.DeepEqual(w, n) {
			continue
		}
		c := ConfigChange{Key: k, Was: w, Now: n}
		changes = append(changes, c)
		if inWas && checkpointKey(k) {
			refused = append(refused, c)
		}
	}
	if len(refused) > 0 {
		var b strings.Builder
		for i, c := range refused {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(c.String())
		}
		return changes, fmt.Errorf("the configuration changes what the checkpoint is: %s", b.String())
	}
	return changes, nil
}

// flatConfig reads a YAML configuration into its keys as
// "section.key" (nested mappings joined with dots) and their values.
func flatConfig(data []byte) (map[string]any, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	out := map[string]any{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, x := range m {
				walk(prefix+k+".", x)
			}
			return
		}
		out[strings.TrimSuffix(prefix, ".")] = v
	}
	walk("", doc)
	return out, nil
}

// resumeChanges compares the configuration a resume runs with (resolved)
// with the one recorded in out/config.yaml, when both are known: a change
// of a checkpoint key is an error; the others are logged and returned.
func resumeChanges(out string, resolved []byte, log io.Writer) ([]ConfigChange, error) {
	path := filepath.Join(out, "config.yaml")
	recorded, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || resolved == nil {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resume: %w", err)
	}
	changes, err := compareResumeConfig(recorded, resolved)
	if err != nil {
		return nil, fmt.Errorf("resume: %s: %w (as recorded in %s): resume with the recorded values, or train into another --out", out, err, path)
	}
	if len(changes) > 0 {
		parts := make([]string, len(changes))
		for i, c := range changes {
			parts[i] = c.String()
		}
		fmt.Fprintf(log, "resume: %d keys differ from %s: %s\n", len(changes), path, strings.Join(parts, ", "))
	}
	return changes, nil
}

// annotate is the metrics line of step m: for the first step of a resumed
// run whose configuration changed, with "config_changed": {key: [was,
// now]} added.
func (r *run) annotate(step int, m record) any {
	if step != r.resumedFrom+1 || len(r.configChanges) == 0 {
		return m
	}
	b, err := json.Marshal(m)
	var line map[string]any
	if err != nil || json.Unmarshal(b, &line) != nil {
		return m
	}
	changed := map[string][2]any{}
	for _, c := range r.configChanges {
		changed[c.Key] = [2]any{c.Was, c.Now}
	}
	line["config_changed"] = changed
	return line
}
