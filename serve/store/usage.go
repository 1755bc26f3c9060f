package store

// What the sessions database holds, in all and per tenant (a session's
// owner), and the limits on it (serve.max_sessions, max_state_bytes and
// their per-tenant counterparts). The counts follow every commit exactly:
// a write transaction changes a tally, which becomes the store's only when
// it commits.

import (
	"fmt"
	"maps"
	"sync"
)

// Usage is what the store holds: sessions, and the bytes of their keys and
// values (sessions and steps, as JSON).
type Usage struct {
	Sessions int
	Bytes    int64
}

// Limits bound what the store holds (zero: no bound), in all and per
// tenant (the sessions of one owner): a session more than MaxSessions or
// MaxSessionsPerTenant, or a session or step that would take the stored
// bytes past MaxBytes or its tenant's past MaxBytesPerTenant, is refused
// with a *LimitError (CommitSteps refuses such a step alone and stores the
// others). The server also checks the usage before it runs a step, so
// that a full store refuses it before the guard's work.
type Limits struct {
	MaxSessions          int
	MaxBytes             int64
	MaxSessionsPerTenant int
	MaxBytesPerTenant    int64
}

// LimitError is a session or step refused for a limit: Key names it
// ("max_sessions", "max_state_bytes", "max_sessions_per_tenant",
// "max_state_bytes_per_tenant"), Tenant the owner a per-tenant limit
// counted.
type LimitError struct {
	Key       string
	Tenant    string
	Have, Max int64
}

func (e *LimitError) Error() string {
	switch e.Key {
	case "max_sessions":
		return fmt.Sprintf("%d sessions are stored, the most serve.max_sessions allows (%d)", e.Have, e.Max)
	case "max_sessions_per_tenant":
		return fmt.Sprintf("tenant %q holds %d sessions, the most serve.max_sessions_per_tenant allows (%d)", e.Tenant, e.Have, e.Max)
	case "max_state_bytes_per_tenant":
		return fmt.Sprintf("the sessions of tenant %q hold %d bytes; serve.max_state_bytes_per_tenant allows %d", e.Tenant, e.Have, e.Max)
	}
	return fmt.Sprintf("the sessions database holds %d bytes; serve.max_state_bytes allows %d", e.Have, e.Max)
}

// tally is the usage a write transaction sees and changes: the store's
// total and per-tenant usage, with the transaction's changes.
type tally struct {
	total   Usage
	tenants map[string]Usage // the tenants this transaction changed
	base    map[string]Usage // the store's, before it (read only)
}

// clone is a copy of t that can change apart.
func (t *tally) clone() *tally {
	c := *t
	c.tenants = maps.Clone(t.tenants)
	return &c
}

// of is tenant's usage.
func (t *tally) of(tenant string) Usage {
	if u, ok := t.tenants[tenant]; ok {
		return u
	}
	return t.base[tenant]
}

// add counts sessions and bytes more (or fewer) for tenant.
func (t *tally) add(tenant string, sessions int, bytes int64) {
	u := t.of(tenant)
	u.Sessions += sessions
	u.Bytes += bytes
	t.tenants[tenant] = u
	t.total.Sessions += sessions
	t.total.Bytes += bytes
}

// admit refuses, with a *LimitError, sessions more sessions and bytes more
// bytes of tenant that would pass a limit of l: the total's limits first.
func (t *tally) admit(l Limits, tenant string, sessions int, bytes int64) error {
	mine := t.of(tenant)
	switch {
	case sessions > 0 && l.MaxSessions > 0 && t.total.Sessions+sessions > l.MaxSessions:
		return &LimitError{Key: "max_sessions", Have: int64(t.total.Sessions), Max: int64(l.MaxSessions)}
	case sessions > 0 && l.MaxSessionsPerTenant > 0 && mine.Sessions+sessions > l.MaxSessionsPerTenant:
		return &LimitError{Key: "max_sessions_per_tenant", Tenant: tenant, Have: int64(mine.Sessions), Max: int64(l.MaxSessionsPerTenant)}
	case bytes > 0 && l.MaxBytes > 0 && t.total.Bytes+bytes > l.MaxBytes:
		return &LimitError{Key: "max_state_bytes", Have: t.total.Bytes, Max: l.MaxBytes}
	case bytes > 0 && l.MaxBytesPerTenant > 0 && mine.Bytes+bytes > l.MaxBytesPerTenant:
		return &LimitError{Key: "max_state_bytes_per_tenant", Tenant: tenant, Have: mine.Bytes, Max: l.MaxBytesPerTenant}
	}
	return nil
}

// counts is what a store holds and its limits, which every write changes
// under mu: a write's tally becomes the store's only when the write
// succeeds.
type counts struct {
	mu      sync.Mutex // held across every write, so that usage follows the writes exactly
	usage   Usage
	tenants map[string]Usage // what each owner's sessions hold (owners with none left out)
	limits  Limits
}

// write runs fn under mu with a tally of the usage, which fn updates as it
// writes and which becomes the store's when fn succeeds.
func (c *counts) write(fn func(u *tally) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := &tally{total: c.usage, tenants: map[string]Usage{}, base: c.tenants}
	if err := fn(u); err != nil {
		return err
	}
	c.usage = u.total
	if c.tenants == nil {
		c.tenants = map[string]Usage{}
	}
	for tenant, v := range u.tenants {
		if v.Sessions <= 0 {
			delete(c.tenants, tenant)
		} else {
			c.tenants[tenant] = v
		}
	}
	return nil
}

// SetLimits sets the bounds Create and CommitSteps enforce.
func (c *counts) SetLimits(l Limits) {
	c.mu.Lock()
	c.limits = l
	c.mu.Unlock()
}

// Usage returns what the store holds.
func (c *counts) Usage() Usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.usage
}

// UsageOf returns what the sessions of one owner (a tenant) hold.
func (c *counts) UsageOf(owner string) Usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tenants[owner]
}
