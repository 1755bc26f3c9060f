// Command replay-e2e runs the loop from the guard's own traffic back to
// training with the real binary (make replay-e2e): `mageguard serve` and
// `mageguard mcp --monitor --listen` on a random tiny checkpoint
// (configs/tiny.yaml), tenants' tokens, an MCP server answering from the
// recording; synth trajectories played through both (package
// internal/replay, as the in-process TestOwnTrafficRoundTrip does), the
// true labels posted as an operator's; then `data import sessions`,
// `data validate`, the imports compared with the originals, two steps of
// `train` on the serve import and an `eval` of the mcp import. Each
// phase's time is printed. Run it from the repository root:
//
//	go run ./scripts/replay-e2e --bin bin/mageguard --out runs/replay-e2e [--trajectories 4]
package main

import (
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/internal/replay"
	"github.com/mageguard/mageguard/internal/servetest"
	"github.com/mageguard/mageguard/scripts/internal/check"
)

func main() {
	bin := flag.String("bin", "bin/mageguard", "the mageguard binary")
	out := flag.String("out", "runs/replay-e2e", "the folder of the imports, the checkpoint and the eval report")
	n := flag.Int("trajectories", 4, "synth trajectories to play (>= 1)")
	data := flag.String("data", "data/synth/eval.jsonl", "the trajectories' file")
	flag.Parse()
	if *n < 1 || *bin == "" || *out == "" {
		fmt.Fprintln(os.Stderr, "replay-e2e: --trajectories must be >= 1, --bin and --out set")
		os.Exit(2)
	}
	check.Main("replay-e2e", func(t *check.T) { replayE2E(t, *bin, *out, *data, *n) })
}

// replayE2E plays n trajectories of data through the binary bin and
// writes the imports, the trained checkpoint and the report under out.
func replayE2E(t *check.T, bin, out, data string, n int) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	start := time.Now()
	phase := func(what string) {
		t.Logf("replay-e2e: %-50s %6.1fs", what, time.Since(start).Seconds())
		start = time.Now()
	}
	mg := func(args ...string) string {
		b, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("mageguard %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	tiny := filepath.Join(tmp, "tiny")
	mg("model", "init", "--config", "configs/tiny.yaml", "--out", tiny)
	_, tokensText := replay.Tokens(t)
	tokensFile := filepath.Join(tmp, "tokens.yaml")
	if err := os.WriteFile(tokensFile, []byte(tokensText), 0o600); err != nil {
		t.Fatal(err)
	}
	guard := []string{"--config", "configs/tiny.yaml", "--model", tiny, "--tokens-file", tokensFile}
	trs := replay.Trajectories(t, data, n)
	phase("a tiny checkpoint (model init)")

	serveState := filepath.Join(tmp, "serve")
	base, stop := startBinary(t, bin, `serve: listening on (http://[^ ]+)`, "", append([]string{"serve", "--addr", "127.0.0.1:0", "--state", serveState}, guard...)...)
	phase("serve started")
	serveIDs := replay.Serve(t, base, trs)
	stop()
	phase(fmt.Sprintf("%d trajectories through serve", n))

	down := replay.NewRecordedTools(t, trs)
	ds := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return down.Server }, nil))
	t.Cleanup(ds.Close)
	mcpState := filepath.Join(tmp, "mcp")
	base, stop = startBinary(t, bin, `mcp: listening on (http://[^ ]+)`, "mcp: ready",
		append([]string{"mcp", "--monitor", "--listen", "127.0.0.1:0", "--state", mcpState, "--upstream-url", ds.URL}, guard...)...)
	phase("mcp --monitor started")
	mcpIDs := replay.Gateway(t, base, filepath.Join(mcpState, "audit.jsonl"), down, trs)
	stop()
	phase(fmt.Sprintf("%d trajectories through mcp --monitor", n))

	files := map[string]string{"serve": filepath.Join(out, "serve.jsonl"), "mcp": filepath.Join(out, "mcp.jsonl")}
	for source, state := range map[string]string{"serve": serveState, "mcp": mcpState} {
		t.Logf("%s", strings.TrimSpace(mg("data", "import", "sessions", "--state", state, "--out", files[source])))
		t.Logf("%s", strings.TrimSpace(mg("data", "validate", files[source])))
	}
	replay.CheckImported(t, files["serve"], "serve", trs, serveIDs)
	replay.CheckImported(t, files["mcp"], "mcp", trs, mcpIDs)
	phase("import, validate and compare")

	mg("train", "--config", "configs/tiny.yaml", "--model", tiny, "--data", files["serve"], "--out", filepath.Join(out, "train"),
		"--set", "train.steps=2", "--set", "train.save_every=2", "--set", "train.eval_every=0", "--set", fmt.Sprintf("train.trajectories=%d", min(n, 4)))
	if _, err := os.Stat(filepath.Join(out, "train", "checkpoint-2")); err != nil {
		t.Errorf("train wrote no checkpoint-2: %v", err)
	}
	phase("train, 2 steps on the serve import")
	mg("eval", "--config", "configs/tiny.yaml", "--model", filepath.Join(out, "train", "checkpoint-2"), "--data", files["mcp"], "--out", filepath.Join(out, "eval"))
	if _, err := os.Stat(filepath.Join(out, "eval", "report.md")); err != nil {
		t.Errorf("eval wrote no report: %v", err)
	}
	phase("eval of the trained checkpoint on the mcp import")
}

// startBinary starts the binary with args and returns the URL its stderr
// announces (the first group of listening), once ready appears there too
// (when given) and its /healthz answers 200; stop interrupts it and waits
// for it to exit (it also runs when the check ends).
func startBinary(t *check.T, bin, listening, ready string, args ...string) (string, func()) {
	var stderr servetest.SyncBuffer
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(os.Interrupt)
		if err := <-done; err != nil {
			t.Errorf("%s: %v\n%s", args[0], err, stderr.String())
		}
	}
	t.Cleanup(stop)
	re := regexp.MustCompile(listening)
	var base string
	servetest.PollUntil(t, 120*time.Second, args[0]+" to listen", func() bool {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("%s exited: %v\n%s", args[0], err, stderr.String())
		default:
		}
		if m := re.FindStringSubmatch(stderr.String()); m != nil && strings.Contains(stderr.String(), ready) {
			base = m[1]
			return true
		}
		return false
	})
	servetest.PollUntil(t, 120*time.Second, args[0]+"'s model to load", func() bool {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return base, stop
}
