package dataset

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/mageguard/mageguard/internal/strictjson"
)

// Tool is one tool the agent was shown (a trajectory's optional tool
// list): its name, description and parameters' JSON schema. The guard's
// memory reads the list as untrusted content, as it reads observations.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"` // a JSON object (a JSON schema), kept as read, compacted
}

var toolFields = []string{"name", "description", "parameters"}

// validateTools requires every tool a non-empty name given once, valid
// UTF-8 text and parameters (when given) a JSON object.
func (t *Trajectory) validateTools() error {
	seen := map[string]int{}
	for i := range t.Tools {
		tool := &t.Tools[i]
		p := fmt.Sprintf("tools[%d]", i)
		switch {
		case tool.Name == "":
			return fieldErr(p+".name", "must not be empty")
		case !utf8.ValidString(tool.Name):
			return fieldErr(p+".name", "holds invalid UTF-8")
		case !utf8.ValidString(tool.Description):
			return fieldErr(p+".description", "holds invalid UTF-8")
		}
		if j, ok := seen[tool.Name]; ok {
			return fieldErr(p+".name", "%q is also tools[%d]'s name", tool.Name, j)
		}
		seen[tool.Name] = i
		if len(tool.Parameters) > 0 {
			if err := checkArguments(tool.Parameters); err != nil {
				return fieldErr(p+".parameters", "%s", err.Msg)
			}
		}
	}
	return nil
}

// decodeTools decodes a record's optional "tools" array strictly.
func decodeTools(obj map[string]json.RawMessage, t *Trajectory) error {
	raw, ok := obj["tools"]
	if !ok {
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil || items == nil {
		return fieldErr("tools", "want an array, got %s", strictjson.ValueKind(raw))
	}
	t.Tools = make([]Tool, len(items))
	for i, item := range items {
		p := fmt.Sprintf("tools[%d]", i)
		m, ok := strictjson.Members(item)
		if !ok {
			return fieldErr(p, "want an object, got %s", strictjson.ValueKind(item))
		}
		if k, unknown := strictjson.UnknownKey(m, toolFields...); unknown {
			return fieldErr(p+"."+k, "unknown field")
		}
		tool := &t.Tools[i]
		if err := reqString(m, p+".", "name", &tool.Name); err != nil {
			return err
		}
		if _, ok := m["description"]; ok {
			if err := reqString(m, p+".", "description", &tool.Description); err != nil {
				return err
			}
		}
		if params, ok := m["parameters"]; ok {
			if ferr := checkArguments(params); ferr != nil {
				return fieldErr(p+".parameters", "%s", ferr.Msg)
			}
			var err error
			if tool.Parameters, err = compactJSON(params); err != nil {
				return fieldErr(p+".parameters", "%v", err)
			}
		}
	}
	return nil
}

// toolsEqual compares tool lists, parameters as JSON values.
func toolsEqual(a, b []Tool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Description != b[i].Description ||
			(len(a[i].Parameters) > 0 || len(b[i].Parameters) > 0) && !JSONEqual(a[i].Parameters, b[i].Parameters) {
			return false
		}
	}
	return true
}
