package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestPathsStayInTheFolder: relative paths inside the folder resolve,
// anything that leaves it is refused (.., absolute, a link out).
func TestPathsStayInTheFolder(t *testing.T) {
	root := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rel string
		ok  bool
	}{
		{"", true}, {".", true}, {"a.txt", true}, {"sub/../a.txt", true},
		{"../a.txt", false}, {"/etc/passwd", false}, {"sub/../../a", false}, {"out/passwd", false},
	} {
		_, err := resolve(root, c.rel)
		if (err == nil) != c.ok {
			t.Errorf("resolve(%q): %v, want ok %v", c.rel, err, c.ok)
		}
	}
}

// TestToolsOverMCP: an MCP client lists the three tools, writes a file,
// reads it back and lists it; a path out of the folder is a tool error.
func TestToolsOverMCP(t *testing.T) {
	root := t.TempDir()
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := newServer(root).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, " "); got != "list_directory read_file write_file" {
		t.Errorf("tools %q", got)
	}
	call := func(name string, args map[string]any) (string, bool) {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return res.Content[0].(*mcp.TextContent).Text, res.IsError
	}
	if text, isErr := call("write_file", map[string]any{"path": "notes.txt", "content": "hello"}); isErr || text != "wrote 5 bytes to notes.txt" {
		t.Errorf("write_file: %q (error %v)", text, isErr)
	}
	if text, isErr := call("read_file", map[string]any{"path": "notes.txt"}); isErr || text != "hello" {
		t.Errorf("read_file: %q (error %v)", text, isErr)
	}
	if text, isErr := call("list_directory", map[string]any{"path": "."}); isErr || text != "notes.txt" {
		t.Errorf("list_directory: %q (error %v)", text, isErr)
	}
	if text, isErr := call("read_file", map[string]any{"path": "../x"}); !isErr || !strings.Contains(text, "inside the served folder") {
		t.Errorf("read_file ../x: %q (error %v)", text, isErr)
	}
}
