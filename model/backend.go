package model

import (
	"github.com/gomlx/gomlx/backends"

	"github.com/mageguard/mageguard/model/backend"
)

// NewBackend is backend.New and DefaultBackendConfig is backend.Default,
// under the names they had when they lived in this package; they remain
// for the callers not yet moved to package backend.
func NewBackend(cfg backend.Config) (backends.Backend, error) { return backend.New(cfg) }

// DefaultBackendConfig is backend.Default (see NewBackend).
func DefaultBackendConfig() backend.Config { return backend.Default() }
