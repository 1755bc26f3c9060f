// Command mcp-files is a small MCP tool server over stdio: list_directory,
// read_file and write_file inside one folder, with the official Go SDK. It
// is what `make mcp-demo` puts behind `mageguard mcp`, so that the gateway
// can be tried with no network and no npm; every path is relative to the
// folder, and one that leaves it (.., an absolute path, a symbolic link
// out) is refused.
//
//	mcp-files DIR
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxFileBytes bounds what read_file returns and write_file accepts.
const maxFileBytes = 1 << 20

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: mcp-files DIR (an MCP server over stdio: list_directory, read_file, write_file inside DIR)")
		os.Exit(2)
	}
	root, err := filepath.Abs(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	if st, err := os.Stat(root); err != nil || !st.IsDir() {
		log.Fatalf("mcp-files: %s is not a directory", root)
	}
	if err := newServer(root).Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatalf("mcp-files: %v", err)
	}
}

// pathArgs are the arguments of list_directory and read_file.
type pathArgs struct {
	Path string `json:"path" jsonschema:"a path relative to the served folder"`
}

// writeArgs are write_file's arguments.
type writeArgs struct {
	Path    string `json:"path" jsonschema:"a path relative to the served folder"`
	Content string `json:"content" jsonschema:"the file's new content"`
}

// newServer returns the MCP server of the three tools over the folder root.
func newServer(root string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcp-files", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "list_directory", Description: "List the entries of a directory of the served folder"},
		func(ctx context.Context, _ *mcp.CallToolRequest, a pathArgs) (*mcp.CallToolResult, any, error) {
			return result(listDirectory(root, a.Path))
		})
	mcp.AddTool(s, &mcp.Tool{Name: "read_file", Description: "Read a text file of the served folder"},
		func(ctx context.Context, _ *mcp.CallToolRequest, a pathArgs) (*mcp.CallToolResult, any, error) {
			return result(readFile(root, a.Path))
		})
	mcp.AddTool(s, &mcp.Tool{Name: "write_file", Description: "Write a text file of the served folder (created or replaced)"},
		func(ctx context.Context, _ *mcp.CallToolRequest, a writeArgs) (*mcp.CallToolResult, any, error) {
			return result(writeFile(root, a.Path, a.Content))
		})
	return s
}

// result turns a tool's text or error into its MCP result (an error is a
// tool result with isError, which the agent reads).
func result(text string, err error) (*mcp.CallToolResult, any, error) {
	if err != nil {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
}

// resolve returns the path rel names inside root, refusing one that leaves
// it (lexically, or through a symbolic link).
func resolve(root, rel string) (string, error) {
	if rel == "" {
		rel = "."
	}
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("path %q: want a path inside the served folder", rel)
	}
	p := filepath.Join(root, rel)
	if real, err := filepath.EvalSymlinks(p); err == nil {
		if r, err := filepath.Rel(root, real); err != nil || !filepath.IsLocal(r) {
			return "", fmt.Errorf("path %q: leads out of the served folder", rel)
		}
	}
	return p, nil
}

// listDirectory lists a directory: one entry a line, folders with a "/".
func listDirectory(root, rel string) (string, error) {
	p, err := resolve(root, rel)
	if err != nil {
		return "", err
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return "", fmt.Errorf("list_directory %s: %w", rel, stripRoot(err, root))
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, "\n"), nil
}

// readFile returns a file's text, refusing more than maxFileBytes.
func readFile(root, rel string) (string, error) {
	p, err := resolve(root, rel)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("read_file %s: %w", rel, stripRoot(err, root))
	}
	if st.Size() > maxFileBytes {
		return "", fmt.Errorf("read_file %s: %d bytes, more than the %d this server returns", rel, st.Size(), maxFileBytes)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("read_file %s: %w", rel, stripRoot(err, root))
	}
	return string(data), nil
}

// writeFile writes content to a file of the folder (its directory must exist).
func writeFile(root, rel, content string) (string, error) {
	if len(content) > maxFileBytes {
		return "", fmt.Errorf("write_file %s: %d bytes, more than the %d this server accepts", rel, len(content), maxFileBytes)
	}
	p, err := resolve(root, rel)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		return "", fmt.Errorf("write_file %s: %w", rel, stripRoot(err, root))
	}
	return fmt.Sprintf("wrote %d bytes to %s", len(content), rel), nil
}

// stripRoot shows a file error without the served folder's absolute path.
func stripRoot(err error, root string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return errors.New(strings.TrimPrefix(strings.TrimPrefix(pe.Path, root), "/") + ": " + pe.Err.Error())
	}
	return err
}
