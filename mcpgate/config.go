package mcpgate

import "fmt"

// Config is the mcp section of the configuration: what one downstream or
// one client may make the gateway hold (docs/reliability.md#the-mcp-gateway).
type Config struct {
	MaxListPages int `yaml:"max_list_pages"` // pages of one tools/list the gateway follows; past them the listing fails, naming the downstream
	MaxListTools int `yaml:"max_list_tools"` // tools of one listing, all pages together; past them the listing fails
	// MaxListBytes bounds the tools' JSON of one listing, all pages
	// together, summed as pages arrive; past it the listing fails, naming
	// the downstream. Its range keeps a pin file (a listing's definitions,
	// approved and pending) within what is read back.
	MaxListBytes int64 `yaml:"max_list_bytes"`
	// MaxPendingRequests and MaxPendingRequestBytes bound the downstream's
	// requests to the client (sampling, elicitation, roots) awaiting the
	// client's answer, per client session, by count and by their params'
	// JSON bytes; one more is answered with an error at once.
	MaxPendingRequests      int   `yaml:"max_pending_requests"`
	MaxPendingRequestBytes  int64 `yaml:"max_pending_request_bytes"`
	MaxNotificationsPerCall int   `yaml:"max_notifications_per_call"` // the downstream's notifications (progress, logs) passed on during one client request; more are dropped and counted
	// MaxClientSessions and MaxClientSessionsPerToken bound the client
	// sessions open at once (each with its downstream: a process, or a
	// connection to --upstream-url), in all and per token name; one more
	// initialize is refused before any downstream is started.
	MaxClientSessions         int `yaml:"max_client_sessions"`
	MaxClientSessionsPerToken int `yaml:"max_client_sessions_per_token"`
}

// DefaultConfig returns the defaults: 100 pages, 1,000 tools and 8 MiB
// of tools' JSON a listing, 16 pending requests and 4 MiB of them per session, 1,000
// notifications a request, 64 client sessions in all and 16 per token.
func DefaultConfig() Config {
	return Config{
		MaxListPages:              100,
		MaxListTools:              1000,
		MaxListBytes:              8 << 20,
		MaxPendingRequests:        16,
		MaxPendingRequestBytes:    4 << 20,
		MaxNotificationsPerCall:   1000,
		MaxClientSessions:         64,
		MaxClientSessionsPerToken: 16,
	}
}

// Validate checks the values; errors start with the key's name.
func (c *Config) Validate() error {
	ints := []struct {
		key    string
		v, max int64
	}{
		{"max_list_pages", int64(c.MaxListPages), 1 << 20},
		{"max_list_tools", int64(c.MaxListTools), 1 << 20},
		{"max_list_bytes", c.MaxListBytes, 64 << 20},
		{"max_pending_requests", int64(c.MaxPendingRequests), 1 << 20},
		{"max_pending_request_bytes", c.MaxPendingRequestBytes, 1 << 40},
		{"max_notifications_per_call", int64(c.MaxNotificationsPerCall), 1 << 30},
		{"max_client_sessions", int64(c.MaxClientSessions), 1 << 20},
		{"max_client_sessions_per_token", int64(c.MaxClientSessionsPerToken), 1 << 20},
	}
	for _, k := range ints {
		if k.v < 1 || k.v > k.max {
			return fmt.Errorf("%s must be in [1, %d], got %d", k.key, k.max, k.v)
		}
	}
	if c.MaxClientSessionsPerToken > c.MaxClientSessions {
		return fmt.Errorf("max_client_sessions_per_token (%d) must be <= max_client_sessions (%d)", c.MaxClientSessionsPerToken, c.MaxClientSessions)
	}
	return nil
}
