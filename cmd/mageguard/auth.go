package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mageguard/mageguard/serve"
)

// authFlags are the authentication flags of serve and mcp.
type authFlags struct {
	tokenFile, tokensFile string
	insecure              bool
}

func (a *authFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&a.tokenFile, "token-file", "", "file holding the bearer token, one operator's (else $"+tokenEnv+")")
	fl.StringVar(&a.tokensFile, "tokens-file", "", "YAML file of tenants' tokens: tokens: [{name, role: agent|operator, sha256}]")
	fl.BoolVar(&a.insecure, "insecure-no-auth", false, "serve without a token (loopback addresses only)")
}

// tokens returns the tokens a server on addr accepts: the principals of
// --tokens-file (with neither --token-file nor $MAGEGUARD_TOKEN, which it
// would ignore), or the one operator of --token-file or $MAGEGUARD_TOKEN;
// nil (no authentication) only with --insecure-no-auth on a loopback
// address. Errors start with cmd.
func (a *authFlags) tokens(cmd, addr string, log io.Writer) (*serve.Tokens, error) {
	if a.tokensFile != "" {
		switch {
		case a.tokenFile != "":
			return nil, fmt.Errorf("%s: give --token-file or --tokens-file, not both", cmd)
		case a.insecure:
			return nil, fmt.Errorf("%s: --insecure-no-auth with --tokens-file: drop one of them", cmd)
		case strings.TrimSpace(os.Getenv(tokenEnv)) != "":
			return nil, fmt.Errorf("%s: $%s is set and --tokens-file is given: its token would not be accepted; unset it, or add its digest to the tokens file (as an operator)", cmd, tokenEnv)
		}
		t, err := serve.LoadTokens(a.tokensFile)
		if err != nil {
			return nil, fmt.Errorf("%s: --tokens-file: %w", cmd, err)
		}
		return t, nil
	}
	token, err := serveToken(a.tokenFile, a.insecure, addr, prefixWriter{log, cmd})
	if err != nil {
		return nil, errors.New(cmd + strings.TrimPrefix(err.Error(), "serve"))
	}
	if token == "" {
		return nil, nil
	}
	return serve.OperatorToken(token), nil
}

// prefixWriter writes serveToken's warnings ("serve: warning: …") under
// another command's name.
type prefixWriter struct {
	w   io.Writer
	cmd string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.cmd+strings.TrimPrefix(string(b), "serve")); err != nil {
		return 0, err
	}
	return len(b), nil
}
