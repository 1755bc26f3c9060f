package doccmd

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestExtract: block lines with continuations, variables, comments and
// pipes, and inline spans; a usage summary marked, its brackets dropped.
func TestExtract(t *testing.T) {
	md := "Run `mageguard config --set rewards.gamma=0.5` or `mageguard eval [--data F]`.\n" +
		"```json\n{\"mageguard\": 1}\n```\n" +
		"```sh\n" +
		"CKPT=runs/tiny/checkpoint-8   # a checkpoint\n" +
		"mageguard eval --model $CKPT \\\n" +
		"    --out runs/e   # comment\n" +
		"echo '[\"a # b\"]' | mageguard tokenize --untrusted\n" +
		"make demo\n" +
		"```\n" +
		"`mageguard model generate --prompt \"Hello there\"`\n"
	path := filepath.Join(t.TempDir(), "x.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	cs, err := Extract(path)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		line   int
		args   []string
		inline bool
	}
	var gs []got
	for _, c := range cs {
		gs = append(gs, got{c.Line, c.Args, c.Inline})
	}
	want := []got{
		{1, []string{"config", "--set", "rewards.gamma=0.5"}, true},
		{1, []string{"eval", "--data", "F"}, true},
		{7, []string{"eval", "--model", "runs/tiny/checkpoint-8", "--out", "runs/e"}, false},
		{9, []string{"tokenize", "--untrusted"}, false},
		{12, []string{"model", "generate", "--prompt", "Hello there"}, true},
	}
	if !reflect.DeepEqual(gs, want) {
		t.Errorf("got %+v\nwant %+v", gs, want)
	}
	if !cs[1].Syntax || cs[0].Syntax || cs[2].Syntax {
		t.Errorf("syntax marks: %v %v %v", cs[0].Syntax, cs[1].Syntax, cs[2].Syntax)
	}
	if cs[2].Shell != "mageguard eval --model runs/tiny/checkpoint-8  --out runs/e" {
		t.Errorf("shell line %q", cs[1].Shell)
	}
}
