package config

import (
	"path/filepath"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// PathKeys are the keys whose values are file or directory paths. A
// relative path given in a configuration file is relative to that file's
// folder (like its `base:`), so a command finds the files a configuration
// names from any working directory; one given with --set, or a default,
// is relative to the working directory. Load makes every one absolute, so
// the configuration a run writes (its config.yaml, a checkpoint's
// mageguard.yaml) works from anywhere.
var PathKeys = []string{
	"model.path",
	"model.tokenizer",
	"train.data",
	"train.eval_data",
	"eval.data",
	"sft.teacher", // unless a built-in teacher (synth, synth-myopic, synth-leaky[:P])
	"sweep.base_config",
	"sweep.eval_data",
}

// isPathValue reports whether value of key names a path: not empty, and for
// sft.teacher not the name of a built-in teacher.
func isPathValue(key, value string) bool {
	if value == "" {
		return false
	}
	if key == "sft.teacher" {
		switch {
		case value == "synth", value == "synth-myopic", value == "synth-leaky", strings.HasPrefix(value, "synth-leaky:"):
			return false
		}
	}
	return true
}

// resolveFilePaths makes the relative paths that the file node root sets
// (PathKeys present in it) relative to dir, in dst.
func resolveFilePaths(root *yaml.Node, dst reflect.Value, dir string) {
	for _, key := range PathKeys {
		if !nodeHasKey(root, key) {
			continue
		}
		if f, ok := fieldByKey(dst, key); ok && f.Kind() == reflect.String {
			if v := f.String(); isPathValue(key, v) && !filepath.IsAbs(v) {
				f.SetString(filepath.Join(dir, v))
			}
		}
	}
}

// absPaths makes every relative path of PathKeys in dst absolute, against
// the working directory.
func absPaths(dst reflect.Value) error {
	for _, key := range PathKeys {
		if f, ok := fieldByKey(dst, key); ok && f.Kind() == reflect.String {
			if v := f.String(); isPathValue(key, v) && !filepath.IsAbs(v) {
				abs, err := filepath.Abs(v)
				if err != nil {
					return err
				}
				f.SetString(abs)
			}
		}
	}
	return nil
}

// nodeHasKey reports whether the mapping root sets the dotted key.
func nodeHasKey(root *yaml.Node, key string) bool {
	n := root
	for _, part := range strings.Split(key, ".") {
		if n == nil || n.Kind != yaml.MappingNode {
			return false
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == part {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n != nil
}

// fieldByKey finds the field of the struct v at the dotted key.
func fieldByKey(v reflect.Value, key string) (reflect.Value, bool) {
	for _, part := range strings.Split(key, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		f, ok := fieldByTag(v, part)
		if !ok {
			return reflect.Value{}, false
		}
		v = f
	}
	return v, true
}
