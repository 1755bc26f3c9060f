//go:build noxla

package backend

import (
	"errors"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
)

// xlaAvailable reports whether the xla backend is compiled in (build tag noxla removes it).
const xlaAvailable = false

// xlaDownloadsOff is never set: there is no go-xla in this binary.
var xlaDownloadsOff atomic.Bool

// disableXLADownloads does nothing: there is no go-xla in this binary.
func disableXLADownloads() {}

func newXLABackend(string, bool, map[string]any) (backends.Backend, error) {
	return nil, errors.New("xla is not compiled into this binary (built with -tags noxla)")
}
