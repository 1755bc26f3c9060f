package mcpgate

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mageguard/mageguard/serve"
)

// HTTPOptions configure HTTPHandler.
type HTTPOptions struct {
	// Tokens authenticate /mcp: a client session belongs to the token
	// that opened it (another token's requests on it are refused) and its
	// guard session is owned by the token's name. nil: no authentication.
	Tokens *serve.Tokens
	// API answers every path but /mcp (serve.Server's Handler: /v1/,
	// /healthz, /metrics); nil: 404.
	API http.Handler
	// AllowedHosts are the host names a request's Host and Origin may
	// name besides loopback's (localhost, 127.0.0.1, ::1).
	AllowedHosts []string
	// AnyHost accepts any Host, and an Origin naming the request's own
	// host (a server listening beyond loopback without AllowedHosts).
	AnyHost bool
	// SessionTimeout closes a client session idle this long (0: never).
	SessionTimeout time.Duration
}

// HTTPHandler serves the gateway over Streamable HTTP at /mcp, and
// o.API at every other path, behind a check of Host and Origin against
// DNS rebinding (403). A request body at /mcp larger than
// serve.max_body_bytes (the guard's MaxBodyBytes) is answered 413, as the
// API's are.
func (g *Gateway) HTTPHandler(o HTTPOptions) http.Handler {
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return g.server },
		&mcp.StreamableHTTPOptions{SessionTimeout: o.SessionTimeout, MaxRequestBodyBytes: g.opts.Guard.MaxBodyBytes()})
	if o.Tokens != nil {
		verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
			p, ok := o.Tokens.Lookup(token)
			if !ok {
				return nil, fmt.Errorf("%w: wrong bearer token", auth.ErrInvalidToken)
			}
			return &auth.TokenInfo{UserID: p.Name, Extra: map[string]any{"role": p.Role}}, nil
		}
		h = auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	if o.API != nil {
		mux.Handle("/", o.API)
	}
	return CheckOrigin(o.AllowedHosts, o.AnyHost, mux)
}

// CheckOrigin refuses (403) a request whose Host is not loopback's or in
// allowed (unless anyHost), or whose Origin header names another host: a
// page of another site, even one whose name resolves to this address (DNS
// rebinding), cannot reach the handler through a browser.
func CheckOrigin(allowed []string, anyHost bool, next http.Handler) http.Handler {
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = strings.ToLower(a)
	}
	ok := func(hostport string) bool {
		h := hostOf(hostport)
		return h == "localhost" || h == "127.0.0.1" || h == "::1" || slices.Contains(names, h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !anyHost && !ok(r.Host) {
			http.Error(w, fmt.Sprintf("forbidden: Host %q is not allowed (protection against DNS rebinding; --allowed-host adds a name)", serve.ShortText(r.Host)), http.StatusForbidden)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			if err != nil || u.Host == "" || !(ok(u.Host) || anyHost && hostOf(u.Host) == hostOf(r.Host)) {
				http.Error(w, fmt.Sprintf("forbidden: Origin %q is not allowed", serve.ShortText(origin)), http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hostOf is the lower-case host name of host[:port], without brackets.
func hostOf(hostport string) string {
	h := strings.ToLower(hostport)
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.Trim(h, "[]")
}
