// Command mcp-overhead measures what `mageguard mcp` itself adds to a
// tools/call over stdio, beside the guard step and the downstream: it
// starts the gateway (a mageguard binary, a configuration and a
// checkpoint; --monitor, with serve.threshold 1 so that a random guard
// blocks nothing) in front of itself as a downstream MCP server with one
// tool, calls that tool N times one at a time as an MCP client (the Go
// SDK's), and reads the gateway's audit log. A call's overhead is its
// time as the client sees it minus the guard step (the decision record's
// step_us) and the downstream's call (the outcome record's downstream_us):
// the client's and the downstream's stdio hops, the gateway's checks, the
// audit's two synced writes and what else runs on the reply path. It
// prints the p50 and p90 of each part with the load average before and
// after. It asserts nothing: `make mcp-overhead` runs it on the tiny demo
// checkpoint, and docs/mcp.md keeps its figures.
//
//	go run ./scripts/mcp-overhead -mageguard bin/mageguard -config configs/tiny.yaml -model bin/mcp-tiny [-calls 60] [-out FILE]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/mcpgate"
)

// note is what the downstream's tool returns: a short file's text, as a
// read tool would, the same at every call so that the guard's prompts stay
// alike.
const note = "Meeting moved to 3 pm on Thursday; bring the Q3 figures."

func main() {
	downstream := flag.Bool("downstream", false, "serve the downstream MCP server on stdio (the gateway starts this)")
	bin := flag.String("mageguard", "bin/mageguard", "the mageguard binary")
	config := flag.String("config", "configs/tiny.yaml", "the guard's configuration")
	model := flag.String("model", "", "the guard's checkpoint directory (required)")
	calls := flag.Int("calls", 60, "tools/call requests timed")
	warmup := flag.Int("warmup", 3, "calls before the timed ones (the first creates the guard session)")
	out := flag.String("out", "", "also write the figures to this JSON file")
	flag.Parse()
	var err error
	if *downstream {
		err = serveDownstream()
	} else {
		err = run(*bin, *config, *model, *calls, *warmup, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp-overhead:", err)
		os.Exit(1)
	}
}

// serveDownstream is the downstream MCP server: one tool, read_note.
func serveDownstream() error {
	s := mcp.NewServer(&mcp.Implementation{Name: "mcp-overhead-downstream", Version: "1"}, nil)
	type in struct {
		Path string `json:"path"`
	}
	mcp.AddTool(s, &mcp.Tool{Name: "read_note", Description: "Read a note by its path."},
		func(context.Context, *mcp.CallToolRequest, in) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: note}}}, nil, nil
		})
	return s.Run(context.Background(), &mcp.StdioTransport{})
}

// figures are the measured parts of a tools/call, milliseconds.
type figures struct {
	Calls      int        `json:"calls"`
	Blocked    int        `json:"blocked"` // decisions to block (forwarded: --monitor); their resume is in the overhead
	LoadBefore string     `json:"load_before"`
	LoadAfter  string     `json:"load_after"`
	Total      [2]float64 `json:"total_ms_p50_p90"`
	Step       [2]float64 `json:"step_ms_p50_p90"`
	Downstream [2]float64 `json:"downstream_ms_p50_p90"`
	Overhead   [2]float64 `json:"overhead_ms_p50_p90"`
}

func run(bin, config, model string, calls, warmup int, outPath string) error {
	if model == "" {
		return errors.New("-model DIR is required")
	}
	if calls < 1 || warmup < 0 {
		return fmt.Errorf("-calls %d and -warmup %d: want at least 1 and 0", calls, warmup)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "mcp-overhead-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	audit := filepath.Join(state, "audit.jsonl")
	cmd := exec.Command(bin, "mcp", "--config", config, "--model", model, "--state", state, "--audit", audit,
		"--monitor", "--task", "Summarise my notes", "--set", "serve.threshold=1", "--", self, "-downstream")
	logFile, err := os.Create(filepath.Join(state, "gateway.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd.Stderr = logFile // shown when something fails
	err = measure(cmd, audit, calls, warmup, outPath)
	if err != nil {
		if log, rerr := os.ReadFile(logFile.Name()); rerr == nil {
			lines := strings.Split(strings.TrimSpace(string(log)), "\n")
			fmt.Fprintln(os.Stderr, strings.Join(lines[max(len(lines)-20, 0):], "\n"))
		}
	}
	return err
}

// measure runs the calls through the gateway that cmd starts and prints
// (and with outPath writes) the figures.
func measure(cmd *exec.Cmd, audit string, calls, warmup int, outPath string) error {
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "mcp-overhead", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		return fmt.Errorf("starting the gateway: %w", err)
	}
	f := figures{Calls: calls, LoadBefore: loadAverage()}
	var wall []time.Duration
	for i := range warmup + calls {
		start := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_note", Arguments: map[string]any{"path": "notes/monday.txt"}})
		took := time.Since(start)
		if err != nil {
			cs.Close()
			return fmt.Errorf("call %d: %w", i, err)
		}
		if res.IsError {
			cs.Close()
			return fmt.Errorf("call %d: the gateway answered an error: %v", i, res.Content)
		}
		if i >= warmup {
			wall = append(wall, took)
		}
	}
	f.LoadAfter = loadAverage()
	if err := cs.Close(); err != nil {
		return fmt.Errorf("closing the gateway: %w", err)
	}
	recs, err := mcpgate.ReadAudit(audit)
	if err != nil {
		return err
	}
	var step, down []time.Duration
	for _, r := range recs {
		switch {
		case r.Event == mcpgate.EventDecision && r.Step != nil:
			step = append(step, time.Duration(r.StepUS)*time.Microsecond)
			if r.Decision == "block" && len(step) > warmup {
				f.Blocked++
			}
		case r.Event == mcpgate.EventOutcome:
			down = append(down, time.Duration(r.DownstreamUS)*time.Microsecond)
		}
	}
	if len(step) != warmup+calls || len(down) != warmup+calls {
		return fmt.Errorf("the audit log has %d decisions and %d outcomes for %d calls", len(step), len(down), warmup+calls)
	}
	step, down = step[warmup:], down[warmup:]
	over := make([]time.Duration, calls)
	for i := range over {
		over[i] = wall[i] - step[i] - down[i]
	}
	f.Total, f.Step, f.Downstream, f.Overhead = p5090(wall), p5090(step), p5090(down), p5090(over)
	fmt.Printf("mageguard mcp over stdio, %d calls one at a time (after %d); load average before %s, after %s; %d decisions to block (forwarded)\n",
		calls, warmup, f.LoadBefore, f.LoadAfter, f.Blocked)
	fmt.Printf("%-36s %9s %9s\n", "ms", "p50", "p90")
	for _, row := range []struct {
		name string
		v    [2]float64
	}{{"tools/call as the client sees it", f.Total}, {"the guard step (audit step_us)", f.Step},
		{"the downstream (audit downstream_us)", f.Downstream}, {"the gateway's own (the rest)", f.Overhead}} {
		fmt.Printf("%-36s %9.2f %9.2f\n", row.name, row.v[0], row.v[1])
	}
	if outPath != "" {
		data, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(outPath, append(data, '\n'), 0o644)
	}
	return nil
}

// p5090 is the nearest-rank p50 and p90 of ds, in milliseconds.
func p5090(ds []time.Duration) [2]float64 {
	s := slices.Sorted(slices.Values(ds))
	at := func(p int) float64 {
		k := max((p*len(s)+99)/100, 1)
		return float64(s[k-1].Microseconds()) / 1000
	}
	return [2]float64{at(50), at(90)}
}

// loadAverage is /proc/loadavg's three load averages, or "?".
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
