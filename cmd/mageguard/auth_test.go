package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mageguard/mageguard/serve"
)

// TestAuthFlags: --tokens-file's tenants, --token-file's operator, and
// the refusals, named after the command that refuses.
func TestAuthFlags(t *testing.T) {
	dir := t.TempDir()
	sum := sha256.Sum256([]byte("agent-token-0123456789"))
	tokensFile := filepath.Join(dir, "tokens.yaml")
	os.WriteFile(tokensFile, []byte("tokens:\n  - {name: bot, role: agent, sha256: "+hex.EncodeToString(sum[:])+"}\n"), 0o644)
	badFile := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badFile, []byte("tokens:\n  - {name: bot, role: root, sha256: x}\n"), 0o644)
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("operator-token-0123456789\n"), 0o600)
	t.Setenv(tokenEnv, "")

	a := authFlags{tokensFile: tokensFile}
	tokens, err := a.tokens("mcp", "0.0.0.0:8080", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := tokens.Lookup("agent-token-0123456789"); !ok || p != (serve.Principal{Name: "bot", Role: serve.RoleAgent}) {
		t.Errorf("the agent's token: %+v %v", p, ok)
	}
	a = authFlags{tokenFile: tokenFile}
	if tokens, err = a.tokens("serve", "0.0.0.0:8080", nil); err != nil {
		t.Fatal(err)
	}
	if p, ok := tokens.Lookup("operator-token-0123456789"); !ok || p.Role != serve.RoleOperator {
		t.Errorf("--token-file's token: %+v %v", p, ok)
	}
	var log bytes.Buffer
	a = authFlags{insecure: true}
	if tokens, err = a.tokens("mcp", "127.0.0.1:0", &log); err != nil || tokens != nil || !strings.HasPrefix(log.String(), "mcp: warning: no authentication") {
		t.Errorf("--insecure-no-auth: %v %v %q", tokens, err, log.String())
	}
	for _, c := range []struct {
		a    authFlags
		want string
	}{
		{authFlags{tokensFile: tokensFile, tokenFile: tokenFile}, "mcp: give --token-file or --tokens-file, not both"},
		{authFlags{tokensFile: tokensFile, insecure: true}, "mcp: --insecure-no-auth with --tokens-file"},
		{authFlags{tokensFile: badFile}, `mcp: --tokens-file: ` + badFile + `: tokens file: tokens[0] (bot): role "root"`},
		{authFlags{tokensFile: filepath.Join(dir, "missing")}, "mcp: --tokens-file: open"},
		{authFlags{}, "mcp: no token: give --token-file FILE"},
		{authFlags{insecure: true}, "mcp: --insecure-no-auth on"},
	} {
		addr := "10.0.0.1:80"
		if _, err := c.a.tokens("mcp", addr, nil); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.a, err, c.want)
		}
	}
}

// TestTokensFileRefusesTheEnvironmentsToken: $MAGEGUARD_TOKEN set beside
// --tokens-file is refused, as --token-file is (before, it was ignored
// without a word, and its token answered 401).
func TestTokensFileRefusesTheEnvironmentsToken(t *testing.T) {
	dir := t.TempDir()
	sum := sha256.Sum256([]byte("agent-token-0123456789"))
	tokensFile := filepath.Join(dir, "tokens.yaml")
	os.WriteFile(tokensFile, []byte("tokens:\n  - {name: bot, role: agent, sha256: "+hex.EncodeToString(sum[:])+"}\n"), 0o644)
	t.Setenv(tokenEnv, "operator-token-0123456789")
	a := authFlags{tokensFile: tokensFile}
	if _, err := a.tokens("serve", "127.0.0.1:8080", nil); err == nil || !strings.Contains(err.Error(), "serve: $MAGEGUARD_TOKEN is set and --tokens-file is given") {
		t.Errorf("error %v", err)
	}
}
