// Package config loads mageguard's YAML configuration: defaults, then a file,
// then repeatable `--set key=value` overrides with dotted keys, then flags.
//
// Every section of the configuration is a struct owned by the package that
// uses it (rewards.Config, grpo.Config, …); Config composes them. Keys are the
// structs' yaml tags. An unknown key or a value of the wrong type is an error
// that names the dotted key (and the file and line when it came from a file).
package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Validator is implemented by config sections that can check their values.
// Validate returns an error naming the offending key relative to the section
// (e.g. "gamma must be in [0, 1)"); the caller prefixes the section name.
type Validator interface {
	Validate() error
}

// LoadFile decodes the YAML file path into dst (a pointer to a struct that
// already holds the defaults). Keys absent from the file keep their values.
// A top-level `base: FILE` key (a path relative to this file) names a file
// loaded first, which this one overrides. The relative paths the file gives
// to PathKeys are made relative to the file's folder.
func LoadFile(path string, dst any) error {
	return loadFile(path, dst, 0, true)
}

// maxConfigFileBytes bounds a configuration file (configs/ hold a few KB).
const maxConfigFileBytes = 1 << 20

// loadFile is LoadFile; relToFile false leaves the file's relative paths
// relative to the working directory (LoadRun).
func loadFile(path string, dst any, depth int, relToFile bool) error {
	if depth > 8 {
		return fmt.Errorf("config %s: more than 8 nested base files (a cycle?)", path)
	}
	if st, err := os.Stat(path); err == nil && st.Size() > maxConfigFileBytes {
		return fmt.Errorf("config %s: %d bytes, more than the %d a configuration file may have", path, st.Size(), maxConfigFileBytes)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if len(doc.Content) == 0 { // empty file
		return nil
	}
	root := doc.Content[0]
	if err := checkDuplicates(root, ""); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	// A top-level `base: FILE` (relative to this file) is loaded first; the
	// rest of this file overrides it.
	if root.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(root.Content); i += 2 {
			if root.Content[i].Value != "base" {
				continue
			}
			base := root.Content[i+1].Value
			if !filepath.IsAbs(base) {
				base = filepath.Join(filepath.Dir(path), base)
			}
			if err := loadFile(base, dst, depth+1, relToFile); err != nil {
				return fmt.Errorf("config %s: base: %w", path, err)
			}
			root.Content = append(root.Content[:i:i], root.Content[i+2:]...)
			break
		}
	}
	if err := suggest(apply(root, reflect.ValueOf(dst).Elem(), ""), dst); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if relToFile {
		resolveFilePaths(root, reflect.ValueOf(dst).Elem(), filepath.Dir(path))
	}
	return nil
}

// Set applies one `key=value` override, where key is dotted
// (e.g. "rewards.gamma=0.25") and value is a YAML scalar, list or map.
func Set(dst any, kv string) error {
	key, value, ok := strings.Cut(kv, "=")
	key = strings.TrimSpace(key)
	if !ok || key == "" {
		return fmt.Errorf("--set %q: want key=value", kv)
	}
	var valNode yaml.Node
	if err := yaml.Unmarshal([]byte(value), &valNode); err != nil {
		return fmt.Errorf("--set %s: bad value %q: %w", key, value, err)
	}
	var val *yaml.Node
	if len(valNode.Content) == 0 {
		val = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: ""}
	} else {
		val = valNode.Content[0]
	}
	zeroLines(val) // errors from --set name the key, not a line
	// Build the nested mapping a: {b: {c: value}} and apply it like a file.
	parts := strings.Split(key, ".")
	node := val
	for i := len(parts) - 1; i >= 0; i-- {
		node = &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: parts[i]}, node}}
	}
	if err := checkDuplicates(node, ""); err != nil {
		return fmt.Errorf("--set %s: %w", key, err)
	}
	if err := suggest(apply(node, reflect.ValueOf(dst).Elem(), ""), dst); err != nil {
		return fmt.Errorf("--set %s: %w", key, err)
	}
	return nil
}

// apply decodes node into v, walking struct fields by their yaml tags so that
// unknown keys are reported with their full dotted name.
func apply(node *yaml.Node, v reflect.Value, prefix string) error {
	if v.Kind() == reflect.Struct && node.Kind == yaml.MappingNode && !hasUnmarshaler(v) {
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, val := node.Content[i], node.Content[i+1]
			name := join(prefix, k.Value)
			f, ok := fieldByTag(v, k.Value)
			if !ok {
				return &unknownKeyError{where: at(k), key: name}
			}
			if err := apply(val, f, name); err != nil {
				return err
			}
		}
		return nil
	}
	if v.Kind() == reflect.Struct && node.Kind != yaml.MappingNode && !hasUnmarshaler(v) {
		return fmt.Errorf("%skey %q is a section: want a mapping, got %q", at(node), prefix, node.Value)
	}
	if v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct && node.Kind == yaml.MappingNode {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return apply(node, v.Elem(), prefix)
	}
	// Decode into a fresh value so a failed decode leaves the old value intact.
	fresh := reflect.New(v.Type())
	if v.Kind() == reflect.Map || v.Kind() == reflect.Slice {
		// replace, do not merge
	} else {
		fresh.Elem().Set(v)
	}
	if err := node.Decode(fresh.Interface()); err != nil {
		where, msg := at(node), decodeError(err, v.Type())
		if m := leadingLine.FindStringSubmatch(msg); m != nil { // a custom decoder named a more precise line
			where, msg = m[1], msg[len(m[1]):]
		}
		return fmt.Errorf("%skey %q: bad value %s: %s", where, prefix, valueText(node), msg)
	}
	// yaml.v3 truncates a float into an integer field (1.5 → 1) and lets
	// −Inf through as an undefined integer: refuse both.
	if isInt(v.Kind()) && node.Kind == yaml.ScalarNode && node.ShortTag() == "!!float" {
		var f float64
		if err := node.Decode(&f); err != nil || f != math.Trunc(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%skey %q: bad value %s: want an integer", at(node), prefix, valueText(node))
		}
	}
	v.Set(fresh.Elem())
	return nil
}

// checkDuplicates reports a mapping that lists a key twice (YAML decoders
// would silently keep the last one), naming the dotted key and both lines.
func checkDuplicates(n *yaml.Node, prefix string) error {
	switch n.Kind {
	case yaml.MappingNode:
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			name := join(prefix, k.Value)
			if line, dup := seen[k.Value]; dup {
				if line == 0 { // from --set
					return fmt.Errorf("key %q is given twice", name)
				}
				return fmt.Errorf("%skey %q is given twice (first on line %d)", at(k), name, line)
			}
			seen[k.Value] = k.Line
			if err := checkDuplicates(n.Content[i+1], name); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := checkDuplicates(c, fmt.Sprintf("%s[%d]", prefix, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func isInt(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// valueText shows a value in an error: a scalar quoted, a list or mapping
// as one line of flow YAML.
func valueText(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return strconv.Quote(n.Value)
	}
	c := *n
	c.Style = yaml.FlowStyle
	data, err := yaml.Marshal(&c)
	if err != nil {
		return "(unprintable)"
	}
	return strings.TrimSpace(string(data))
}

// decodeError says what a value of type t must be when yaml.v3 could not
// decode into it; other errors keep their text, without yaml's line prefix
// (the caller names the line).
func decodeError(err error, t reflect.Type) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		switch {
		case t.Kind() == reflect.Bool:
			return "want true or false"
		case isInt(t.Kind()) && strings.HasPrefix(t.Kind().String(), "uint"):
			return "want a non-negative integer"
		case isInt(t.Kind()):
			return "want an integer"
		case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
			return "want a number"
		case t.Kind() == reflect.String:
			return "want a string"
		case t.Kind() == reflect.Slice:
			return "want a list"
		case t.Kind() == reflect.Map:
			return "want a mapping"
		}
	}
	if te != nil { // yaml.v3's "line N: cannot unmarshal …": the caller names the line
		return lineRE.ReplaceAllString(cleanYAMLError(err), "$1")
	}
	// A custom decoder's own message (e.g. the sweep grid's), which may
	// name a more precise line; --set values have none (line 0).
	return strings.ReplaceAll(err.Error(), "line 0: ", "")
}

// leadingLine matches a "line N: " at the start of a message.
var leadingLine = regexp.MustCompile(`^(line \d+: )`)

// lineRE matches the "line N: " yaml.v3 puts before its messages.
var lineRE = regexp.MustCompile(`(^|\n)\s*line \d+: `)

// at returns "line N: " for nodes read from a file and "" for --set nodes.
func at(n *yaml.Node) string {
	if n.Line == 0 {
		return ""
	}
	return fmt.Sprintf("line %d: ", n.Line)
}

func zeroLines(n *yaml.Node) {
	n.Line, n.Column = 0, 0
	for _, c := range n.Content {
		zeroLines(c)
	}
}

func hasUnmarshaler(v reflect.Value) bool {
	_, ok := v.Addr().Interface().(yaml.Unmarshaler)
	return ok
}

// yamlName is the key of a struct field in YAML: its yaml tag's name, or
// its Go name in lower case. inline: the field's own keys stand in its
// parent's place. ok is false for a field YAML leaves out (unexported, or
// tagged "-").
func yamlName(sf reflect.StructField) (name string, inline, ok bool) {
	if !sf.IsExported() {
		return "", false, false
	}
	name, opts, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
	if name == "-" {
		return "", false, false
	}
	if name == "" {
		name = strings.ToLower(sf.Name)
	}
	return name, strings.Contains(opts, "inline"), true
}

// fieldByTag finds the struct field whose yaml tag (or lower-cased name) is key,
// descending into inlined structs.
func fieldByTag(v reflect.Value, key string) (reflect.Value, bool) {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name, inline, ok := yamlName(t.Field(i))
		switch {
		case !ok:
			continue
		case inline:
			if f, ok := fieldByTag(v.Field(i), key); ok {
				return f, true
			}
		case name == key:
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

func cleanYAMLError(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "yaml: unmarshal errors:\n")
	return strings.TrimSpace(s)
}

// Validate checks that every float setting of cfg is a finite number
// within float32's range (the graphs compute in float32), then calls
// Validate on every section of cfg (fields of the struct cfg points to
// that implement Validator) and prefixes errors with the section's key.
func Validate(cfg any) error {
	v := reflect.ValueOf(cfg).Elem()
	if err := checkFloats(v, ""); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if name == "" {
			name = strings.ToLower(sf.Name)
		}
		if val, ok := v.Field(i).Addr().Interface().(Validator); ok {
			if err := val.Validate(); err != nil {
				return fmt.Errorf("config: %s.%w", name, err)
			}
		}
	}
	return nil
}

// checkFloats refuses NaN, ±Inf and magnitudes beyond float32's range in
// every float field under v (structs walked by their yaml keys, slices and
// maps element by element), naming the dotted key: a key added later is
// covered without a line of its own.
func checkFloats(v reflect.Value, key string) error {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.Abs(f) > math.MaxFloat32 {
			return fmt.Errorf("%s must be a finite number within ±%.3g, got %v", key, math.MaxFloat32, f)
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return checkFloats(v.Elem(), key)
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if err := checkFloats(v.Index(i), fmt.Sprintf("%s[%d]", key, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			if err := checkFloats(iter.Value(), fmt.Sprintf("%s[%v]", key, iter.Key())); err != nil {
				return err
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			name, inline, ok := yamlName(t.Field(i))
			if !ok {
				continue
			}
			fieldKey := join(key, name)
			if inline {
				fieldKey = key
			}
			if err := checkFloats(v.Field(i), fieldKey); err != nil {
				return err
			}
		}
	}
	return nil
}

// Marshal renders cfg as YAML (the fully resolved configuration of a run).
func Marshal(cfg any) ([]byte, error) {
	return yaml.Marshal(cfg)
}

// unknownKeyError is a key that names no field, with the closest known key.
type unknownKeyError struct {
	where, key string
	closest    string // "" = none close enough
}

func (e *unknownKeyError) Error() string {
	msg := fmt.Sprintf("%sunknown key %q", e.where, e.key)
	if e.closest != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", e.closest)
	}
	return msg
}

// suggest fills an unknownKeyError with the known key of dst closest to
// it; other errors pass through.
func suggest(err error, dst any) error {
	var uk *unknownKeyError
	if errors.As(err, &uk) {
		uk.closest = closestKey(knownKeys(reflect.TypeOf(dst).Elem(), ""), uk.key)
	}
	return err
}

// knownKeys lists the dotted keys of a configuration struct type: its
// sections and their keys, in declaration order.
func knownKeys(t reflect.Type, prefix string) []string {
	var keys []string
	eachKey(t, prefix, func(key string, _ reflect.Type) { keys = append(keys, key) })
	return keys
}

// eachKey calls visit with every dotted key of a configuration struct
// type under prefix and the type it holds (a pointer's element): its
// sections and their keys, in declaration order, a section before its
// keys. An inline field's keys stand in its parent's place; a struct that
// decodes itself (a yaml.Unmarshaler) is one key.
func eachKey(t reflect.Type, prefix string, visit func(key string, t reflect.Type)) {
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name, inline, ok := yamlName(sf)
		if !ok {
			continue
		}
		ft := sf.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if inline {
			eachKey(ft, prefix, visit)
			continue
		}
		key := join(prefix, name)
		visit(key, ft)
		if ft.Kind() == reflect.Struct && !reflect.PointerTo(ft).Implements(unmarshalerType) {
			eachKey(ft, key, visit)
		}
	}
}

// Closest returns the word of known nearest to word by closestKey's rule
// ("" when none is close): the commands' "did you mean" for flags.
func Closest(known []string, word string) string { return closestKey(known, word) }

// closestKey returns the known key nearest to key: one with the same last
// part in another section ("rollout.gamma" → "rewards.gamma"), else the
// one at the smallest edit distance if that is at most a third of key's
// length (at least 2); "" when none is close.
func closestKey(known []string, key string) string {
	leaf := key[strings.LastIndex(key, ".")+1:]
	for _, k := range known {
		if k != key && k[strings.LastIndex(k, ".")+1:] == leaf {
			return k
		}
	}
	best, bestD := "", max(2, len([]rune(key))/3)+1
	for _, k := range known {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in runes.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()
