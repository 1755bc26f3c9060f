//go:build !noxla

package backend

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"
)

// xlaAvailable reports whether the xla backend is compiled in (build tag noxla removes it).
const xlaAvailable = true

// xlaDownloadsOff records that ProcessSettings.Apply turned go-xla's
// plugin downloads off.
var xlaDownloadsOff atomic.Bool

// disableXLADownloads turns go-xla's plugin downloads off, for the process.
func disableXLADownloads() {
	xla.EnableAutoInstall(false)
	xlaDownloadsOff.Store(true)
}

// newXLABackend creates the xla backend. Without autoInstall, a plugin
// given by name (go-xla downloads one it does not find) needs the downloads
// off: by disableXLADownloads, or by GOMLX_NO_AUTO_INSTALL, which go-xla
// reads when the program starts.
func newXLABackend(plugin string, autoInstall bool, options map[string]any) (backends.Backend, error) {
	spec := xlaPluginSpec(plugin)
	if _, envOff := os.LookupEnv(xla.NoAutoInstallEnv); !autoInstall && !envOff && !xlaDownloadsOff.Load() && !filepath.IsAbs(spec) {
		return nil, errors.New("go-xla's plugin downloads are on and model.auto_install is false: apply the process settings first " +
			"(backend.ProcessSettings.Apply; cmd/mageguard does), set " + xla.NoAutoInstallEnv + "=1, or give the plugin's absolute path")
	}
	var opts pjrt.NamedValuesMap
	if options != nil {
		opts = pjrt.NamedValuesMap(options)
	}
	b, err := xla.NewWithOptions(spec, opts)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// xlaPluginSpec turns a plugin name or path into the config string of the
// xla backend ("" = its default choice).
func xlaPluginSpec(plugin string) string {
	return strings.TrimSpace(plugin)
}
