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
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/config"
	"github.com/mageguard/mageguard/serve"
	"github.com/mageguard/mageguard/serve/store"
)

// tokenEnv is the environment variable that may hold the bearer token.
const tokenEnv = "MAGEGUARD_TOKEN"

func newServeCmd() *cobra.Command {
	var (
		modelDir, addr, state, tlsCert, tlsKey, checkState string
		initState                                          bool
		auth                                               authFlags
	)
	cmd := &cobra.Command{
		Use:   "serve --model DIR --state DIR [--addr 127.0.0.1:8080] [--token-file FILE | --tokens-file FILE] [--tls-cert FILE --tls-key FILE] | serve --check-state DIR",
		Short: "Serve the guard over HTTP: sessions with a persistent shadow memory, a decision before each tool call",
		Long: `serve runs the guard loop online (Algorithm 1) for many agent sessions at
once. An agent starts a session with the user's request, then asks before
each tool call whether it may run; steps of concurrent sessions are batched
into one generation (memory calls, then judge calls). Sessions are kept in
one database file under --state (DIR/sessions.db): every answered step's
memory and decision are stored before the answer is sent.

  POST   /v1/sessions              {"user_prompt": "...", "tools": [...]}      → 201 {"id"}
  GET    /v1/sessions              the caller's sessions (an operator's: all)
  POST   /v1/sessions/{id}/assess  {"action": {"name", "arguments"}, "observation", "user_messages"}
                                   → 200 {"decision": "allow"|"block", "score", "rationale", ...}
  POST   /v1/sessions/{id}/resume  let a blocked session go on
  GET    /v1/sessions/{id}         the session as stored;  DELETE /v1/sessions/{id}
  GET    /healthz, /metrics, /openapi.yaml   (no token)

Every /v1/ request needs "Authorization: Bearer TOKEN": the token is the
content of --token-file (surrounding whitespace ignored) or $MAGEGUARD_TOKEN,
an operator's; or one of the tenants' of --tokens-file (YAML: tokens: [{name,
role: agent|operator, sha256}]), where an agent sees and acts only on the
sessions it created and an operator on any; only an operator resumes a
blocked session (an agent may not, its own session included). Without a token, serve refuses
to start, unless --addr is a loopback address and --insecure-no-auth is
given. --tls-cert and --tls-key serve HTTPS.

The guard is the checkpoint --model (model.path) on the model section's
backend, or an OpenAI-compatible server (rollout.generator: openai,
rollout.endpoint, ...). The rollout section says how it is prompted (the
mage variant), the serve section how it is served: batch_size, max_wait_ms,
queue_size (a full queue answers 429), deadline_s, threshold (block on the
score), max_body_bytes, max_prompt_tokens, max_sessions, max_state_bytes,
max_sessions_per_tenant, max_state_bytes_per_tenant, session_idle_s,
max_session_share, greedy. /healthz answers 200 once the
model is loaded.
Ctrl-C or SIGTERM stops accepting requests, finishes the batch that runs,
and exits. docs/serving.md has a curl session and a Go client.

The sessions database is checked before anything is served: a damaged one
is an error naming the damage, and an empty file where it was is refused
unless --init is given. --check-state DIR reports what of DIR/sessions.db
is readable, changing nothing (docs/reliability.md says how to recover).`,
		Example: `  openssl rand -hex 32 > token; chmod 600 token
  mageguard serve --config configs/tiny.yaml --model runs/tiny/checkpoint-8 --state runs/serve --token-file token
  mageguard serve --config configs/tiny.yaml --model runs/tiny/checkpoint-8 --state runs/serve --addr 127.0.0.1:8080 --insecure-no-auth
  mageguard serve --check-state runs/serve`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if checkState != "" {
				return runCheckState(checkState, cmd.OutOrStdout())
			}
			cfg, err := loadConfig()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("model") {
				cfg.Model.Path = modelDir
			}
			if err := config.Validate(cfg); err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			if state == "" {
				return errors.New("serve: --state DIR is required (the sessions database lives there)")
			}
			if (tlsCert == "") != (tlsKey == "") {
				return errors.New("serve: give --tls-cert and --tls-key together")
			}
			if cfg.Rollout.Variant != "mage" {
				return fmt.Errorf("serve: rollout.variant is %q: serve runs the mage guard (memory + judge)", cfg.Rollout.Variant)
			}
			tokens, err := auth.tokens("serve", addr, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			ctx, stop := interruptible(cmd.Context(), cmd.ErrOrStderr(), "serve")
			defer stop()
			return runServe(ctx, cfg, addr, serveState{dir: state, init: initState}, tokens, tlsCert, tlsKey, cmd.ErrOrStderr())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&modelDir, "model", "", "checkpoint directory to serve (model.path)")
	fl.StringVar(&addr, "addr", "127.0.0.1:8080", "address to listen on (host:port; port 0 picks a free one)")
	fl.StringVar(&state, "state", "", "state directory: the sessions database (sessions.db) lives there")
	fl.StringVar(&tlsCert, "tls-cert", "", "TLS certificate (PEM) to serve HTTPS")
	fl.StringVar(&tlsKey, "tls-key", "", "TLS private key (PEM)")
	auth.register(cmd)
	fl.BoolVar(&initState, "init", false, "start an empty sessions database where DIR/sessions.db is an empty file")
	fl.StringVar(&checkState, "check-state", "", "report what of DIR/sessions.db is readable, change nothing, and exit (1 when damaged)")
	return cmd
}

// runCheckState prints what of DIR/sessions.db is readable; a damaged
// database is an error (exit status 1).
func runCheckState(dir string, out io.Writer) error {
	rep, err := store.CheckState(dir, 2*time.Second)
	if err != nil {
		return err
	}
	fmt.Fprint(out, rep)
	if rep.Problems > 0 {
		return fmt.Errorf("serve: %s is damaged (%d problems); docs/reliability.md#the-sessions-database says how to recover", rep.Path, rep.Problems)
	}
	return nil
}

// serveState is the --state directory and whether --init was given.
type serveState struct {
	dir  string
	init bool
}

// serveToken returns the bearer token: --token-file's content without
// surrounding whitespace, else $MAGEGUARD_TOKEN; "" only with
// --insecure-no-auth on a loopback address.
func serveToken(file string, insecure bool, addr string, log io.Writer) (string, error) {
	token := ""
	switch {
	case file != "":
		st, err := os.Stat(file)
		if err != nil {
			return "", fmt.Errorf("serve: --token-file: %w", err)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("serve: --token-file: %w", err)
		}
		if token = strings.TrimSpace(string(data)); token == "" {
			return "", fmt.Errorf("serve: --token-file %s is empty", file)
		}
		if st.Mode().Perm()&0o077 != 0 {
			fmt.Fprintf(log, "serve: warning: %s is readable by others (mode %v); chmod 600 it\n", file, st.Mode().Perm())
		}
	default:
		token = strings.TrimSpace(os.Getenv(tokenEnv))
	}
	if token != "" {
		if insecure {
			return "", errors.New("serve: --insecure-no-auth with a token: drop one of them")
		}
		if len(token) < 16 {
			return "", errors.New("serve: the token is shorter than 16 characters (make one with: openssl rand -hex 32)")
		}
		if strings.ContainsAny(token, " \t\r\n") {
			return "", errors.New("serve: the token holds whitespace")
		}
		return token, nil
	}
	if !insecure {
		return "", fmt.Errorf("serve: no token: give --token-file FILE or $%s (or, on a loopback address only, --insecure-no-auth)", tokenEnv)
	}
	if !loopback(addr) {
		return "", fmt.Errorf("serve: --insecure-no-auth on %q: only a loopback address (127.0.0.1, ::1, localhost) may serve without a token", addr)
	}
	fmt.Fprintf(log, "serve: warning: no authentication (--insecure-no-auth on %s)\n", addr)
	return "", nil
}

// loopback reports whether addr's host is a loopback address.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// runServe opens the store, binds addr, loads the guard's model (the API
// answers meanwhile: /healthz 503), serves until ctx is cancelled, then
// drains and closes.
func runServe(ctx context.Context, cfg *config.Config, addr string, state serveState, tokens *serve.Tokens, tlsCert, tlsKey string, stderr io.Writer) error {
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	st, err := store.Open(state.dir, store.Options{LockWait: 2 * time.Second, Init: state.init})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer st.Close()
	guard, err := newOnlineGuard(cfg, "serve")
	if err != nil {
		return err
	}
	srv, err := serve.New(serve.Options{Config: cfg.Serve, Rollout: cfg.Rollout, Store: st, Tokens: tokens, Log: logger})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	scheme := "http"
	if tlsCert != "" {
		scheme = "https"
	}
	hs := &http.Server{
		Handler:           srv.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      time.Duration(cfg.Serve.DeadlineS*float64(time.Second)) + 30*time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(&slogWriter{logger}, "", 0),
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12},
	}
	served := make(chan error, 1)
	go func() {
		if tlsCert != "" {
			served <- hs.ServeTLS(ln, tlsCert, tlsKey)
		} else {
			served <- hs.Serve(ln)
		}
	}()
	fmt.Fprintf(stderr, "serve: listening on %s://%s (state %s: %s)\n", scheme, ln.Addr(), st.Path(), count(st.Usage().Sessions, "session", "sessions"))

	if err := guard.load(srv, stderr); err != nil {
		hs.Close()
		return err
	}
	fmt.Fprintf(stderr, "serve: ready\n")

	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), time.Duration(cfg.Serve.DeadlineS*float64(time.Second))+5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil {
		fmt.Fprintf(stderr, "serve: shutdown: %v\n", err)
	}
	srv.Close()
	fmt.Fprintf(stderr, "serve: stopped\n")
	return nil
}

// slogWriter turns the HTTP server's own log lines (TLS handshake errors,
// …) into escaped log records.
type slogWriter struct{ l *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	w.l.Warn("http", "message", strings.TrimSpace(string(p)))
	return len(p), nil
}
