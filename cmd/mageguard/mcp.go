package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/mcpgate"
	"github.com/mageguard/mageguard/serve"
	"github.com/mageguard/mageguard/serve/store"
)

// mcpRun is what `mageguard mcp` runs with.
type mcpRun struct {
	cfg                          *config.Config
	state, auditPath, task       string
	upstreamURL                  string
	command                      []string // the downstream's command and arguments (after --)
	listen, api, tlsCert, tlsKey string
	allowedHosts                 []string
	toolPins                     string        // --tool-pins: a reviewed pin file
	idle                         time.Duration // --listen: a client session idle this long is closed
	monitor, init                bool          // init: replace an empty sessions.db (as serve --init)
	tokens                       *serve.Tokens
	stdin                        io.Reader
	stdout, stderr               io.Writer
}

func newMCPCmd() *cobra.Command {
	var (
		r        mcpRun
		modelDir string
		auth     authFlags
	)
	cmd := &cobra.Command{
		Use:   "mcp --model DIR --state DIR [--monitor] [--task TEXT] [--audit FILE] [--listen HOST:PORT] (--upstream-url URL | -- CMD ARGS...)",
		Short: "Guard an MCP server: a gateway that runs the guard on every tool call before it reaches the server",
		Long: `mcp sits between an MCP client (an agent) and one MCP server. Toward the
client it is an MCP server — over stdio by default, over Streamable HTTP at
/mcp with --listen — and toward the tools a client of the downstream server,
started from CMD ARGS (stdio, one process per client session) or reached at
--upstream-url. It exposes the downstream's tools, resources and prompts
unchanged and forwards everything that is not a tool call as is, both ways.

Each tools/call is one step of the guard loop (Algorithm 1), as in serve: the
memory reads the previous call's result, the judge the new memory and the
call. Allowed, the call is forwarded; blocked, the downstream is not called
and the client gets a tool result with isError and the guard's rationale, and
the session's later calls are refused until an operator resumes it (POST
/v1/sessions/ID/resume on --listen's or --api's address). --monitor decides
and records but forwards every call. The user's request is --task, or a
call's params._meta["mageguard/user_prompt"]; without either the memory
starts from the tool results alone.

Tool definitions are pinned at the downstream's first complete listing
(STATE/pins/, or from a reviewed --tool-pins file): a tool whose definition
changes later, or a tool listed later, is not approved — enforcing, the
client is shown the pinned definition (or not the new tool) and a call to it
is refused; --monitor forwards it and flags it. Every change is audited
(tool_changed). "mageguard mcp tools --state DIR" lists, approves and
revokes pins. The mcp section bounds what a downstream or a client may make
the gateway hold (listing pages and tools, pending requests, notifications,
client sessions).

Guard sessions and steps are stored in --state (sessions.db, as serve's,
checked before anything is served; an empty file where it was is refused
unless --init is given); every decision is appended to --audit (default
STATE/audit.jsonl) before the call is forwarded, its outcome after. The
serve section applies (threshold, greedy, batching, deadlines,
max_prompt_tokens); client sessions share the generation batches.

With --listen, /mcp needs "Authorization: Bearer TOKEN" (--token-file,
--tokens-file or $MAGEGUARD_TOKEN, as serve; --insecure-no-auth on loopback
only), and the serve API (/v1/, /healthz, /metrics) is on the same port;
requests whose Host or Origin is not loopback's or an --allowed-host are
refused. docs/mcp.md has client configurations.`,
		Example: `  mageguard mcp --config configs/tiny.yaml --model runs/tiny/checkpoint-8 --state runs/mcp \
    -- npx -y @modelcontextprotocol/server-filesystem /home/me/notes
  mageguard mcp --config configs/tiny.yaml --model runs/tiny/checkpoint-8 --state runs/mcp --monitor \
    --listen 127.0.0.1:8765 --token-file token --upstream-url http://127.0.0.1:3001/mcp`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("model") {
				cfg.Model.Path = modelDir
			}
			if err := config.Validate(cfg); err != nil {
				return fmt.Errorf("mcp: %w", err)
			}
			r.cfg = cfg
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				r.command = args[dash:]
				args = args[:dash]
			}
			if err := r.check(args, auth); err != nil {
				return err
			}
			if addr := firstOf(r.listen, r.api); addr != "" {
				if r.tokens, err = auth.tokens("mcp", addr, cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
			r.stdin, r.stdout, r.stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			ctx, stop := interruptible(cmd.Context(), cmd.ErrOrStderr(), "mcp")
			defer stop()
			return r.run(ctx)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&modelDir, "model", "", "the guard's checkpoint directory (model.path)")
	fl.StringVar(&r.state, "state", "", "state directory: the sessions database (sessions.db), the tool pins (pins/) and the audit log live there")
	fl.BoolVar(&r.init, "init", false, "start an empty sessions database where STATE/sessions.db is an empty file")
	fl.StringVar(&r.auditPath, "audit", "", "the audit log, JSON lines (default STATE/audit.jsonl)")
	fl.StringVar(&r.task, "task", "", "the user's request, for every session (else per call in _meta[\"mageguard/user_prompt\"])")
	fl.BoolVar(&r.monitor, "monitor", false, "decide and record, but forward every call (shadow mode)")
	fl.StringVar(&r.upstreamURL, "upstream-url", "", "the downstream MCP server's Streamable HTTP endpoint (instead of -- CMD ARGS)")
	fl.StringVar(&r.listen, "listen", "", "serve MCP over Streamable HTTP at http://HOST:PORT/mcp instead of stdio")
	fl.StringVar(&r.api, "api", "", "with stdio: serve the sessions API (/v1/, /healthz, /metrics) at HOST:PORT")
	fl.StringArrayVar(&r.allowedHosts, "allowed-host", nil, "a Host / Origin name to accept besides loopback's (repeatable)")
	fl.DurationVar(&r.idle, "idle-timeout", 5*time.Minute, "with --listen: close a client session (and its downstream) idle this long, freeing its place within mcp.max_client_sessions (0: never)")
	fl.StringVar(&r.tlsCert, "tls-cert", "", "TLS certificate (PEM) to serve HTTPS")
	fl.StringVar(&r.tlsKey, "tls-key", "", "TLS private key (PEM)")
	fl.StringVar(&r.toolPins, "tool-pins", "", "a reviewed tool pin file: its definitions are the approved ones (else the first listing is pinned)")
	auth.register(cmd)
	cmd.AddCommand(newMCPToolsCmd())
	return cmd
}

// firstOf returns the first non-empty string.
func firstOf(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// check refuses flags mcp cannot run with.
func (r *mcpRun) check(args []string, auth authFlags) error {
	switch {
	case r.listen == "" && r.api == "" && (auth != authFlags{}):
		return errors.New("mcp: --token-file, --tokens-file and --insecure-no-auth are for --listen or --api (stdio needs none)")
	case len(args) > 0:
		return fmt.Errorf("mcp: unexpected arguments %q: the downstream's command goes after --", args)
	case r.state == "":
		return errors.New("mcp: --state DIR is required (the sessions database and the audit log live there)")
	case (r.upstreamURL == "") == (len(r.command) == 0):
		return errors.New("mcp: give the downstream MCP server: --upstream-url URL or -- CMD ARGS (one of them)")
	case r.listen != "" && r.api != "":
		return errors.New("mcp: --api is for stdio; with --listen the API is on the same address")
	case (r.tlsCert == "") != (r.tlsKey == ""):
		return errors.New("mcp: give --tls-cert and --tls-key together")
	case r.tlsCert != "" && r.listen == "" && r.api == "":
		return errors.New("mcp: --tls-cert needs --listen or --api")
	case r.idle < 0:
		return errors.New("mcp: --idle-timeout must be >= 0")
	case r.cfg.Rollout.Variant != "mage":
		return fmt.Errorf("mcp: rollout.variant is %q: mcp runs the mage guard (memory + judge)", r.cfg.Rollout.Variant)
	}
	if r.auditPath == "" {
		r.auditPath = filepath.Join(r.state, "audit.jsonl")
	}
	return nil
}

// downstream names the downstream: its URL, or its command line (the
// key of its tool pins).
func (r *mcpRun) downstream() string {
	if r.upstreamURL != "" {
		return r.upstreamURL
	}
	return strings.Join(r.command, " ")
}

// dial is the gateway's Options.Dial: a new downstream connection per
// client session.
func (r *mcpRun) dial() (mcp.Transport, error) {
	if r.upstreamURL != "" {
		return &mcp.StreamableClientTransport{Endpoint: r.upstreamURL, HTTPClient: mcpgate.UpstreamClient(r.cfg.Serve.MaxBodyBytes)}, nil
	}
	c := exec.Command(r.command[0], r.command[1:]...)
	c.Stderr = r.stderr
	return &mcp.CommandTransport{Command: c}, nil
}

// run opens the state, builds the guard and the gateway, and serves until
// ctx ends (stdio: until the client closes its end).
func (r *mcpRun) run(ctx context.Context) error {
	logger := slog.New(slog.NewJSONHandler(r.stderr, nil))
	st, err := store.Open(r.state, store.Options{LockWait: 2 * time.Second, Init: r.init})
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	defer st.Close()
	audit, err := mcpgate.OpenAudit(r.auditPath)
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	defer audit.Close()
	pins, err := mcpgate.OpenPins(r.state, r.downstream(), r.toolPins)
	if err != nil {
		return fmt.Errorf("mcp: %w", err)
	}
	guard, err := newOnlineGuard(r.cfg, "mcp")
	if err != nil {
		return err
	}
	srv, err := serve.New(serve.Options{Config: r.cfg.Serve, Rollout: r.cfg.Rollout, Store: st, Tokens: r.tokens, Log: logger})
	if err != nil {
		return err
	}
	defer srv.Close()
	gw, err := mcpgate.New(mcpgate.Options{Guard: srv, Dial: r.dial, Monitor: r.monitor, Task: r.task, Audit: audit, Log: logger,
		Elide: guard.guard.ElideAction, Downstream: r.downstream(), Pins: pins, Limits: r.cfg.MCP})
	if err != nil {
		return err
	}
	defer gw.Close()
	load := func() error { return guard.load(srv, r.stderr) }
	mode := map[bool]string{false: "enforcing", true: "monitor (every call forwarded)"}[r.monitor]
	fmt.Fprintf(r.stderr, "mcp: %s; state %s, audit %s, tool pins %s\n", mode, st.Path(), audit.Path(), pins.Path())
	if r.listen != "" {
		ln, err := net.Listen("tcp", r.listen)
		if err != nil {
			return fmt.Errorf("mcp: %w", err)
		}
		return r.serveHTTP(ctx, ln, gw.HTTPHandler(r.httpOptions(srv.Handler())), srv, load)
	}
	if err := load(); err != nil { // before the client's first request: stdio clients wait for the model
		return err
	}
	if r.api != "" {
		ln, err := net.Listen("tcp", r.api)
		if err != nil {
			return fmt.Errorf("mcp: --api: %w", err)
		}
		api := mcpgate.CheckOrigin(r.allowedHosts, !loopback(r.api) && len(r.allowedHosts) == 0, srv.Handler())
		apiCtx, stopAPI := context.WithCancel(ctx)
		apiDone := make(chan struct{})
		go func() {
			r.serveHTTP(apiCtx, ln, api, srv, nil)
			close(apiDone)
		}()
		defer func() { stopAPI(); <-apiDone }() // before the store closes
	}
	fmt.Fprintf(r.stderr, "mcp: ready on stdio\n")
	err = gw.ServeStdio(ctx, r.stdin, r.stdout)
	if err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("mcp: the client session ended: %w", err)
	}
	fmt.Fprintf(r.stderr, "mcp: stopped\n")
	return nil
}

// httpOptions are the gateway's HTTP options for --listen.
func (r *mcpRun) httpOptions(api http.Handler) mcpgate.HTTPOptions {
	return mcpgate.HTTPOptions{Tokens: r.tokens, API: api, AllowedHosts: r.allowedHosts,
		AnyHost: !loopback(r.listen) && len(r.allowedHosts) == 0, SessionTimeout: r.idle}
}

// serveHTTP serves h on ln and loads the guard meanwhile (load; nil:
// loaded already), until ctx ends.
func (r *mcpRun) serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, srv *serve.Server, load func() error) error {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(&slogWriter{slog.New(slog.NewJSONHandler(r.stderr, nil))}, "", 0),
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12},
	}
	served := make(chan error, 1)
	go func() {
		if r.tlsCert != "" {
			served <- hs.ServeTLS(ln, r.tlsCert, r.tlsKey)
		} else {
			served <- hs.Serve(ln)
		}
	}()
	scheme := map[bool]string{false: "http", true: "https"}[r.tlsCert != ""]
	what := "the sessions API at /v1/"
	if load != nil {
		what = "MCP at /mcp, the sessions API at /v1/"
	}
	fmt.Fprintf(r.stderr, "mcp: listening on %s://%s (%s)\n", scheme, ln.Addr(), what)
	if load != nil {
		if err := load(); err != nil {
			hs.Close()
			return err
		}
		fmt.Fprintf(r.stderr, "mcp: ready\n")
	}
	select {
	case err := <-served:
		return fmt.Errorf("mcp: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(shutdown) // open SSE streams do not end by themselves
	hs.Close()
	if load != nil {
		srv.Close()
		fmt.Fprintf(r.stderr, "mcp: stopped\n")
	}
	return nil
}
