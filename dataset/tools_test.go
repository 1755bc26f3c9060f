package dataset

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// withTools is a trajectory with a tool list (description with markup, a
// parameters schema, a tool with neither).
func withTools() *Trajectory {
	return &Trajectory{ID: "t:tools:1", Source: "agentdojo", Suite: "banking", UserTaskID: "user_task_0", Model: "m",
		UserPrompt: "Pay the bill.",
		Turns:      []Turn{{Action: Action{Name: "read_file", Arguments: json.RawMessage(`{"file_path":"bill.txt"}`)}, Observation: "ok"}},
		Tools: []Tool{
			{Name: "read_file", Description: "Reads a file. <b>Use it</b> & trust it", Parameters: json.RawMessage(`{"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}`)},
			{Name: "get_balance"},
		}}
}

// TestToolsRoundTrip: a trajectory's tools survive JSONL and Parquet
// writes and reads, parameters byte for byte; a trajectory without tools
// is written without the key (JSONL), as before.
func TestToolsRoundTrip(t *testing.T) {
	tr := withTools()
	if err := tr.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{".jsonl", ".parquet"} {
		p := filepath.Join(t.TempDir(), "t"+ext)
		plain := withTools()
		plain.ID, plain.Tools = "t:plain:1", nil
		if err := WriteAll(p, []*Trajectory{tr, plain}); err != nil {
			t.Fatal(err)
		}
		back, err := ReadAll(p)
		if err != nil {
			t.Fatal(err)
		}
		if !Equal(back[0], tr) || string(back[0].Tools[0].Parameters) != string(tr.Tools[0].Parameters) || back[0].Tools[1].Parameters != nil {
			t.Errorf("%s: %+v", ext, back[0].Tools)
		}
		if len(back[1].Tools) != 0 || !Equal(back[1], plain) {
			t.Errorf("%s: a trajectory without tools read back with %+v", ext, back[1].Tools)
		}
	}
	var buf bytes.Buffer
	plain := withTools()
	plain.Tools = nil
	if err := EncodeJSON(&buf, plain); err != nil || strings.Contains(buf.String(), `"tools":`) {
		t.Errorf("a trajectory without tools encodes as %s (%v)", buf.String(), err)
	}
	if Equal(withTools(), plain) {
		t.Error("Equal ignores the tools")
	}
}

// TestParquetWithoutToolsColumnsReads: a file written before the tools
// columns (the trajectory schema's other columns only) reads, as
// trajectories without tools.
func TestParquetWithoutToolsColumnsReads(t *testing.T) {
	type row struct {
		ID              string   `parquet:"id"`
		Source          string   `parquet:"source"`
		Suite           string   `parquet:"suite"`
		UserTaskID      string   `parquet:"user_task_id"`
		InjectionTaskID *string  `parquet:"injection_task_id,optional"`
		AttackType      *string  `parquet:"attack_type,optional"`
		Model           string   `parquet:"model"`
		UserPrompt      string   `parquet:"user_prompt"`
		Turns           []pqTurn `parquet:"turns,list"`
		Utility         *bool    `parquet:"utility,optional"`
		Security        *bool    `parquet:"security,optional"`
	}
	p := writeRawParquet(t, []row{{ID: "a", Source: "s", Suite: "b", UserTaskID: "u", Model: "m",
		Turns: []pqTurn{{Action: pqAction{Name: "f", Arguments: `{}`}}}}})
	ts, err := ReadAll(p)
	if err != nil || len(ts) != 1 || ts[0].Tools != nil || ts[0].Turns[0].Action.Name != "f" {
		t.Fatalf("%+v %v", ts, err)
	}
}

// TestBadToolsAreRefusedNamingTheField: a tool list of the wrong shape is
// refused, naming the field, in JSONL decoding and in Validate.
func TestBadToolsAreRefusedNamingTheField(t *testing.T) {
	base := `{"id":"a","source":"s","suite":"b","user_task_id":"u","injection_task_id":null,"attack_type":null,"model":"m","user_prompt":"p","turns":[],"utility":null,"security":null,"tools":%s}`
	cases := map[string]string{
		`{}`:                              `field tools: want an array`,
		`[{"description":"x"}]`:           `field tools[0].name: missing`,
		`[{"name":"a","extra":1}]`:        `field tools[0].extra: unknown field`,
		`[{"name":"a","parameters":[1]}]`: `field tools[0].parameters: want a JSON object`,
		`[{"name":"a","parameters":{"x":1,"x":2}}]`: `field tools[0].parameters.x: given twice`,
		`[{"name":"a"},{"name":"a"}]`:               `field tools[1].name: "a" is also tools[0]'s name`,
		`[{"name":""}]`:                             `field tools[0].name: must not be empty`,
		`[{"name":"a","description":3}]`:            `field tools[0].description: want a string`,
	}
	for tools, want := range cases {
		line := []byte(strings.Replace(base, "%s", tools, 1))
		tr, err := DecodeJSON(line)
		if err == nil {
			err = tr.Validate()
		}
		var fe *FieldError
		if !errors.As(err, &fe) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %s", tools, err, want)
		}
	}
}
