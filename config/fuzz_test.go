package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad: any configuration file either loads into a configuration that
// validates, or is an error — never a panic. The seeds are the bundled
// configs and the kinds of mistakes the loader names (a key given twice, an
// unknown key, a bad value, YAML aliases).
func FuzzLoad(f *testing.F) {
	for _, name := range []string{"tiny.yaml", "default.yaml", "sweep-tiny.yaml", "model-tiny.yaml"} {
		data, err := os.ReadFile(filepath.Join("..", "configs", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(data), "")
	}
	f.Add("rewards:\n  gamma: 0.5\n  gamma: 0.25\n", "")
	f.Add("rewards:\n  gamme: 0.5\n", "train.steps=3")
	f.Add("model:\n  num_hidden_layers: 1000000000\n", "")
	f.Add("a: &x [1, 2]\nb: *x\n", "rollout.top_p=2")
	f.Add("", "model.hidden_size=[1, 2]")
	path := filepath.Join(f.TempDir(), "c.yaml") // a worker runs its inputs one at a time
	f.Fuzz(func(t *testing.T, text, set string) {
		if strings.Contains(text, "base:") {
			return // would read other files of the machine
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		var sets []string
		if set != "" {
			sets = []string{set}
		}
		cfg, err := Load(path, sets)
		if err != nil {
			return
		}
		if err := Validate(cfg); err != nil {
			t.Fatalf("Load accepted a configuration that does not validate: %v", err)
		}
		if _, err := Marshal(cfg); err != nil {
			t.Fatalf("a loaded configuration does not marshal: %v", err)
		}
	})
}
