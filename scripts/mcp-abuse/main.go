//lint:file-ignore SA1019 the hostile downstream's sampling requests need a client that takes them (MCP's deprecated sampling)

// Command mcp-abuse runs hostile MCP servers and clients against the real
// `mageguard mcp` binary (a tiny random checkpoint, loopback only) and
// checks that each gets a clear error or a correct answer in bounded time
// and memory: the gateway never crashes (no panic, exit status 0 when
// closed) and its peak RSS (/proc/PID/status VmHWM) stays under 2 GB.
// The cases (docs/reliability.md#the-mcp-gateway):
//
//  1. a tools/list that always returns a nextCursor: the call is answered
//     with an error naming the downstream (mcp.max_list_pages);
//  2. 30,000 sampling/createMessage requests the client never answers:
//     all but mcp.max_pending_requests refused at once;
//  3. an --upstream-url server answering tools/list with a 200 MB plain
//     JSON body: refused at serve.max_body_bytes;
//  4. one token sending 64 bare initialize POSTs to --listen: only
//     mcp.max_client_sessions_per_token downstream processes started;
//  5. a rug pull (a tool's description and schema change after the first
//     listing): the call refused enforcing, audited as tool_changed;
//  6. 100,000 progress notifications during one call: past
//     mcp.max_notifications_per_call dropped, the call completes.
//
// The downstreams are this program itself (-downstream MODE), started by
// the gateway over stdio, and an in-process HTTP server for case 3. It
// prints a line a case (time to the answer, peak RSS, load average) and
// with -out writes them as JSON. `make mcp-abuse` runs it.
//
//	go run ./scripts/mcp-abuse -mageguard bin/mageguard -config configs/tiny.yaml -model DIR [-out FILE]
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/mcpgate"
	"github.com/mageguard/mageguard/scripts/internal/check"
)

// maxRSS is the bound on the gateway's peak resident memory.
const maxRSS = 2 << 30

// caseTimeout bounds each case, the gateway's start included.
const caseTimeout = 3 * time.Minute

func main() {
	downstream := flag.String("downstream", "", "serve a hostile downstream MCP server on stdio in this mode (the gateway starts this)")
	countFile := flag.String("count", "", "with -downstream: append a line to this file at start and at each tools/call")
	bin := flag.String("mageguard", "bin/mageguard", "the mageguard binary")
	config := flag.String("config", "configs/tiny.yaml", "the guard's configuration")
	model := flag.String("model", "", "the guard's checkpoint directory (required)")
	out := flag.String("out", "", "also write the figures to this JSON file")
	only := flag.String("case", "", "run only the case of this name")
	flag.IntVar(&samplingRequests, "sampling", samplingRequests, "unanswered-sampling: the sampling requests the downstream sends during the call")
	flag.IntVar(&notifyCount, "notifications", notifyCount, "notification-flood: the notifications the downstream sends during the call")
	flag.Parse()
	if *downstream != "" {
		if err := serveDownstream(*downstream, *countFile); err != nil {
			fmt.Fprintln(os.Stderr, "mcp-abuse downstream:", err)
			os.Exit(1)
		}
		return
	}
	if *model == "" {
		fmt.Fprintln(os.Stderr, "mcp-abuse: -model DIR is required")
		os.Exit(2)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcp-abuse:", err)
		os.Exit(1)
	}
	r := &runner{bin: *bin, config: *config, model: *model, self: self}
	check.Main("mcp-abuse", func(t *check.T) { r.all(t, *only, *out) })
}

// runner holds what every case needs.
type runner struct {
	bin, config, model, self string
}

// figure is one case's measurement.
type figure struct {
	Case    string  `json:"case"`
	Answer  string  `json:"answer"`       // the error or result the client got, shortened
	Seconds float64 `json:"seconds"`      // from the hostile request to its answer
	StartMB float64 `json:"start_rss_mb"` // the gateway's peak RSS once ready
	PeakMB  float64 `json:"peak_rss_mb"`  // the gateway's peak RSS after the case
	Load    string  `json:"load"`         // /proc/loadavg after the case
	Detail  string  `json:"detail"`       // the case's own counts
	Passed  bool    `json:"passed"`
}

func (r *runner) all(t *check.T, only, outPath string) {
	cases := []struct {
		name string
		run  func(*check.T, *figure)
	}{
		{"endless-cursor", r.endlessCursor},
		{"unanswered-sampling", r.unansweredSampling},
		{"huge-upstream-body", r.hugeUpstreamBody},
		{"initialize-flood", r.initializeFlood},
		{"rug-pull", r.rugPull},
		{"notification-flood", r.notificationFlood},
	}
	var figs []figure
	for _, c := range cases {
		if only != "" && c.name != only {
			continue
		}
		f := figure{Case: c.name}
		ok := check.Run(func(ct *check.T) { c.run(ct, &f) })
		f.Passed, f.Load = ok, loadAverage()
		if !ok {
			t.Errorf("%s: FAIL", c.name)
		}
		t.Logf("%-20s %-4s %9.1f ms  peak RSS %6.1f MB (%.1f MB when ready)  load %s  %s; %s",
			f.Case, map[bool]string{true: "ok", false: "FAIL"}[ok], f.Seconds*1000, f.PeakMB, f.StartMB, f.Load, f.Detail, f.Answer)
		figs = append(figs, f)
	}
	if outPath != "" {
		data, _ := json.MarshalIndent(figs, "", "  ")
		if err := os.WriteFile(outPath, append(data, '\n'), 0o644); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// gateway is a running `mageguard mcp` over stdio with a Go SDK client.
type gateway struct {
	cs    *mcp.ClientSession
	rss   *rssWatch
	cmd   *exec.Cmd
	log   string // its stderr
	state string
	count string // the downstream's count file
}

// startStdio starts the gateway over stdio in front of args (after "--"),
// or of flags' --upstream-url, and connects a client with opts.
func (r *runner) startStdio(t *check.T, ctx context.Context, flags []string, mode string, opts *mcp.ClientOptions) *gateway {
	dir := t.TempDir()
	g := &gateway{log: filepath.Join(dir, "gateway.log"), state: filepath.Join(dir, "state"), count: filepath.Join(dir, "count")}
	args := append([]string{"mcp", "--config", r.config, "--model", r.model, "--state", g.state, "--task", "Summarise my notes"}, flags...)
	if mode != "" {
		args = append(args, "--", r.self, "-downstream", mode, "-count", g.count)
		switch mode {
		case modeNotify:
			args = append(args, "-notifications", strconv.Itoa(notifyCount))
		case modeSampling:
			args = append(args, "-sampling", strconv.Itoa(samplingRequests))
		}
	}
	g.cmd = exec.Command(r.bin, args...)
	logFile, err := os.Create(g.log)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { logFile.Close() })
	g.cmd.Stderr = logFile
	client := mcp.NewClient(&mcp.Implementation{Name: "mcp-abuse", Version: "1"}, opts)
	g.cs, err = client.Connect(ctx, &mcp.CommandTransport{Command: g.cmd}, nil)
	if err != nil {
		t.Fatalf("starting the gateway: %v\n%s", err, tail(g.log))
	}
	t.Cleanup(func() { g.cs.Close() })
	g.rss = watchRSS(g.cmd.Process.Pid)
	return g
}

// finish records the gateway's peak RSS, checks it is under the bound and
// (unless the case ends the gateway's one session) that the gateway is
// alive, closes it and checks that it exited with status 0 and logged no
// panic.
func (g *gateway) finish(t *check.T, f *figure, mustLive bool) {
	checkRSS(t, g.rss, f)
	if _, err := peakRSS(g.cmd.Process.Pid); err != nil && mustLive {
		t.Errorf("the gateway (PID %d) is not running after the case: %v\n%s", g.cmd.Process.Pid, err, tail(g.log))
	}
	err := g.cs.Close()
	if err != nil {
		t.Errorf("the gateway's exit: %v\n%s", err, tail(g.log))
	}
	checkLog(t, g.log)
}

// checkRSS records the peak RSS w saw into f and fails the case past
// maxRSS.
func checkRSS(t *check.T, w *rssWatch, f *figure) {
	peak := w.stop()
	f.PeakMB = float64(peak) / (1 << 20)
	if peak >= maxRSS {
		t.Errorf("the gateway's peak RSS is %.0f MB, over 2 GB", f.PeakMB)
	}
}

// rssWatch reads a process's VmHWM every 10 ms while it runs, so that a
// process that ends by itself still has its peak.
type rssWatch struct {
	last atomic.Int64
	done chan struct{}
	quit chan struct{}
}

func watchRSS(pid int) *rssWatch {
	w := &rssWatch{done: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if n, err := peakRSS(pid); err == nil {
				w.last.Store(n)
			}
			select {
			case <-w.quit:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// stop ends the watch, reading VmHWM once more, and returns the last peak.
func (w *rssWatch) stop() int64 {
	close(w.quit)
	<-w.done
	return w.last.Load()
}

// checkLog fails the case if the gateway's log shows a crash.
func checkLog(t *check.T, log string) {
	data, _ := os.ReadFile(log)
	for _, bad := range []string{"panic:", "fatal error:", "SIGSEGV", "goroutine "} {
		if strings.Contains(string(data), bad) {
			t.Errorf("the gateway's log holds %q:\n%s", bad, tail(log))
			return
		}
	}
}

// 1. A tools/list that always returns a nextCursor.
func (r *runner) endlessCursor(t *check.T, f *figure) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	g := r.startStdio(t, ctx, nil, modeCursor, nil)
	f.StartMB = startRSS(g.cmd.Process.Pid)
	start := time.Now()
	res, err := g.cs.CallTool(ctx, &mcp.CallToolParams{Name: "t1", Arguments: map[string]any{}})
	f.Seconds = time.Since(start).Seconds()
	msg := answerText(res, err)
	f.Answer = short(msg)
	want := "listed more than 100 pages of tools (mcp.max_list_pages)"
	if !strings.Contains(msg, want) || !strings.Contains(msg, "-downstream cursor") {
		t.Errorf("the call's answer %q does not name the downstream and %q", msg, want)
	}
	// The session is not locked: it answers a ping, and the next call the
	// same error.
	if err := g.cs.Ping(ctx, nil); err != nil {
		t.Errorf("a ping after the call: %v", err)
	}
	if _, err := g.cs.CallTool(ctx, &mcp.CallToolParams{Name: "t1", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("the second call: %v", err)
	}
	if calls := countLines(g.count, "call "); calls != 0 {
		t.Errorf("the downstream ran %d calls", calls)
	}
	f.Detail = "no call reached the downstream; the session answers a ping and the next call the same error"
	g.finish(t, f, true)
}

// 2. Sampling requests the client never answers.
func (r *runner) unansweredSampling(t *check.T, f *figure) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	var asked atomic.Int64
	opts := &mcp.ClientOptions{CreateMessageHandler: func(ctx context.Context, _ *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
		asked.Add(1)
		<-ctx.Done() // never answered
		return nil, ctx.Err()
	}}
	g := r.startStdio(t, ctx, []string{"--monitor", "--set", "serve.threshold=1"}, modeSampling, opts)
	f.StartMB = startRSS(g.cmd.Process.Pid)
	start := time.Now()
	res, err := g.cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "notes.txt"}})
	f.Seconds = time.Since(start).Seconds()
	msg := answerText(res, err)
	f.Answer = short(msg)
	want := fmt.Sprintf("%d refused, 0 other answers", samplingRequests-16)
	if err != nil || res.IsError || msg != want {
		t.Errorf("the call's answer %q (%v), want %q", msg, err, want)
	}
	if err := g.cs.Ping(ctx, nil); err != nil {
		t.Errorf("a ping after the call: %v", err)
	}
	if n := asked.Load(); n > 16 {
		t.Errorf("the client was sent %d sampling requests, more than mcp.max_pending_requests (16)", n)
	}
	f.Detail = fmt.Sprintf("%d requests, %d reached the client and were never answered", samplingRequests, asked.Load())
	g.finish(t, f, true)
}

// 3. An --upstream-url server answering with a 200 MB plain JSON body.
func (r *runner) hugeUpstreamBody(t *check.T, f *figure) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	wrote := make(chan int64, 1)
	up := httptest.NewServer(hugeUpstream(wrote))
	defer up.Close()
	g := r.startStdio(t, ctx, []string{"--upstream-url", up.URL + "/mcp"}, "", nil)
	f.StartMB = startRSS(g.cmd.Process.Pid)
	start := time.Now()
	res, err := g.cs.ListTools(ctx, nil)
	f.Seconds = time.Since(start).Seconds()
	msg := answerText(nil, err)
	if err == nil {
		msg = fmt.Sprintf("%d tools", len(res.Tools))
	}
	f.Answer = short(msg)
	if !strings.Contains(msg, "longer than 1048576 bytes (serve.max_body_bytes)") {
		t.Errorf("tools/list answered %q, want the body refused at serve.max_body_bytes", msg)
	}
	select {
	case n := <-wrote:
		f.Detail = fmt.Sprintf("the server wrote %.1f MB of its %d MB before the gateway hung up", float64(n)/(1<<20), hugeBodyBytes>>20)
	case <-time.After(10 * time.Second):
		f.Detail = "the server was still writing 10 s after the answer"
	}
	// The failed read ends the downstream connection, and with it the
	// client session; over stdio the gateway then stops (exit status 0).
	f.Detail += "; the session ended with its downstream, the gateway exited 0"
	g.finish(t, f, false)
}

// 4. One token sending 64 bare initialize POSTs to --listen.
func (r *runner) initializeFlood(t *check.T, f *figure) {
	const posts = 64
	dir := t.TempDir()
	token := randomHex()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatalf("%v", err)
	}
	addr := freePort(t)
	count, logPath := filepath.Join(dir, "count"), filepath.Join(dir, "gateway.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer logFile.Close()
	cmd := exec.Command(r.bin, "mcp", "--config", r.config, "--model", r.model, "--state", filepath.Join(dir, "state"),
		"--task", "Summarise my notes", "--listen", addr, "--token-file", tokenFile,
		"--", r.self, "-downstream", modeCount, "-count", count)
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("%v", err)
	}
	rss := watchRSS(cmd.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
	}()
	base := "http://" + addr
	deadline := time.Now().Add(caseTimeout)
	for {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway was not ready in %v\n%s", caseTimeout, tail(logPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.StartMB = startRSS(cmd.Process.Pid)
	const body = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"flood","version":"1"}}}`
	var wg sync.WaitGroup
	var opened, refused, other atomic.Int32
	var firstOther sync.Once
	var otherText string
	start := time.Now()
	for range posts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", base+"/mcp", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			text := fmt.Sprint(err)
			if err == nil {
				data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
				resp.Body.Close()
				text = string(data)
			}
			switch {
			case strings.Contains(text, `"protocolVersion"`):
				opened.Add(1)
			case strings.Contains(text, "too many client sessions for this token: 16 are open (mcp.max_client_sessions_per_token)"):
				refused.Add(1)
			default:
				other.Add(1)
				firstOther.Do(func() { otherText = text })
			}
		}()
	}
	wg.Wait()
	f.Seconds = time.Since(start).Seconds()
	started := countLines(count, "start ")
	f.Answer = fmt.Sprintf("%d sessions opened, %d refused (mcp.max_client_sessions_per_token)", opened.Load(), refused.Load())
	if opened.Load() != 16 || refused.Load() != posts-16 || other.Load() != 0 {
		t.Errorf("%d opened, %d refused, %d other (%s); want 16 and %d", opened.Load(), refused.Load(), other.Load(), short(otherText), posts-16)
	}
	if started != 16 {
		t.Errorf("%d downstream processes started, want 16", started)
	}
	if _, err := peakRSS(cmd.Process.Pid); err != nil {
		t.Errorf("the gateway (PID %d) is not running after the case: %v\n%s", cmd.Process.Pid, err, tail(logPath))
	}
	checkRSS(t, rss, f)
	// Stopped, the gateway ends its downstreams.
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("the gateway's exit: %v\n%s", err, tail(logPath))
		}
	case <-time.After(30 * time.Second):
		t.Errorf("the gateway did not stop 30 s after SIGTERM")
	}
	alive := 0
	for range 50 {
		alive = 0
		for _, pid := range pids(count) {
			if processAlive(pid) {
				alive++
			}
		}
		if alive == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if alive != 0 {
		t.Errorf("%d downstream processes still run after the gateway stopped", alive)
	}
	f.Detail = fmt.Sprintf("%d POSTs of one token at once, %d downstream processes started, %d left after SIGTERM", posts, started, alive)
	checkLog(t, logPath)
}

// 5. A rug pull, enforcing.
func (r *runner) rugPull(t *check.T, f *figure) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	g := r.startStdio(t, ctx, nil, modeRugPull, nil)
	f.StartMB = startRSS(g.cmd.Process.Pid)
	for i := range 2 { // pinned at the first, poisoned at the second
		res, err := g.cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("tools/list %d: %v", i+1, err)
		}
		if len(res.Tools) != 1 || res.Tools[0].Description != "Read a file." {
			data, _ := json.Marshal(res.Tools)
			t.Errorf("tools/list %d showed the client %s, want the pinned definition", i+1, data)
		}
	}
	start := time.Now()
	res, err := g.cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "notes.txt", "exfil": "ssh-rsa AAAA"}})
	f.Seconds = time.Since(start).Seconds()
	msg := answerText(res, err)
	f.Answer = short(msg)
	if err != nil || !res.IsError || !strings.Contains(msg, `the tool "read_file" changed since it was approved (description, inputSchema differ`) {
		t.Errorf("the call's answer %q (%v), want an isError result naming the change", msg, err)
	}
	if calls := countLines(g.count, "call "); calls != 0 {
		t.Errorf("the downstream ran %d calls", calls)
	}
	g.finish(t, f, true)
	recs, err := mcpgate.ReadAudit(filepath.Join(g.state, "audit.jsonl"))
	if err != nil {
		t.Fatalf("%v", err)
	}
	changed := 0
	for _, rec := range recs {
		if rec.Event == mcpgate.EventToolChanged && rec.Tool == "read_file" && strings.Join(rec.Fields, ",") == "description,inputSchema" && rec.OldHash != "" {
			changed++
		}
	}
	if changed != 1 {
		t.Errorf("the audit log holds %d tool_changed records of read_file, want 1", changed)
	}
	f.Detail = fmt.Sprintf("%d tool_changed record, the call not forwarded", changed)
}

// 6. A downstream flooding progress notifications during one call.
func (r *runner) notificationFlood(t *check.T, f *figure) {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	defer cancel()
	var got atomic.Int64
	opts := &mcp.ClientOptions{ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { got.Add(1) }}
	g := r.startStdio(t, ctx, []string{"--monitor", "--set", "serve.threshold=1"}, modeNotify, opts)
	f.StartMB = startRSS(g.cmd.Process.Pid)
	params := &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "notes.txt"}}
	params.SetProgressToken("p1")
	start := time.Now()
	res, err := g.cs.CallTool(ctx, params)
	f.Seconds = time.Since(start).Seconds()
	msg := answerText(res, err)
	f.Answer = short(msg)
	if err != nil || res.IsError || msg != "the file's text" {
		t.Errorf("the call's answer %q (%v), want the tool's result", msg, err)
	}
	g.finish(t, f, true)
	if n := got.Load(); n < 1 || n > 1000 {
		t.Errorf("the client got %d progress notifications, want 1 to 1000 (mcp.max_notifications_per_call)", n)
	}
	data, _ := os.ReadFile(g.log)
	dropped := int64(0)
	for line := range strings.SplitSeq(string(data), "\n") {
		var rec struct {
			Msg     string `json:"msg"`
			Dropped int64  `json:"dropped"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "notifications dropped" {
			dropped += rec.Dropped
		}
	}
	if dropped < 1 {
		t.Errorf("the gateway logged no dropped notifications")
	}
	f.Detail = fmt.Sprintf("%d notifications sent, %d reached the client, %d dropped by the call's end", notifyCount, got.Load(), dropped)
}

// answerText is a call's text result, or its error.
func answerText(res *mcp.CallToolResult, err error) string {
	if err != nil {
		return err.Error()
	}
	var parts []string
	if res != nil {
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				parts = append(parts, tc.Text)
			}
		}
	}
	return strings.Join(parts, "\n")
}

// peakRSS is /proc/PID/status's VmHWM in bytes; an error if the process is
// gone or a zombie.
func peakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	var hwm int64 = -1
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			switch f[0] {
			case "State:":
				if f[1] == "Z" {
					return 0, fmt.Errorf("PID %d has exited", pid)
				}
			case "VmHWM:":
				hwm, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
	}
	if hwm < 0 {
		return 0, fmt.Errorf("no VmHWM for PID %d", pid)
	}
	return hwm << 10, nil
}

// startRSS is the peak RSS in MB when the gateway is ready (0 if unread).
func startRSS(pid int) float64 {
	n, _ := peakRSS(pid)
	return float64(n) / (1 << 20)
}

// processAlive reports whether pid runs (and is not a zombie).
func processAlive(pid int) bool {
	_, err := peakRSS(pid)
	return err == nil
}

// countLines counts the lines of path starting with prefix.
func countLines(path, prefix string) int {
	n := 0
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), prefix) {
			n++
		}
	}
	return n
}

// pids are the downstream PIDs of a count file.
func pids(path string) []int {
	data, _ := os.ReadFile(path)
	var out []int
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "start "); ok {
			if pid, err := strconv.Atoi(rest); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// freePort is a loopback address with a port free a moment ago.
func freePort(t *check.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func randomHex() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// short is s on one line, its middle cut out past 300 bytes.
func short(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		return strings.ToValidUTF8(s[:120]+" … "+s[len(s)-170:], "")
	}
	return s
}

// tail is the last 20 lines of a log file.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(len(lines)-20, 0):], "\n")
}

// loadAverage is /proc/loadavg's three load averages, or "?".
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
