//go:build !noxla

package model

import (
	"os"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"
)

// xlaAvailable reports whether the xla backend is compiled in (build tag noxla removes it).
const xlaAvailable = true

func newXLABackend(plugin string, autoInstall bool, options map[string]any) (backends.Backend, error) {
	if !autoInstall {
		// Nothing is downloaded at run time unless the user asks for it.
		_ = os.Setenv(xla.NoAutoInstallEnv, "1")
		xla.EnableAutoInstall(false)
	}
	var opts pjrt.NamedValuesMap
	if options != nil {
		opts = pjrt.NamedValuesMap(options)
	}
	b, err := xla.NewWithOptions(xlaPluginSpec(plugin), opts)
	if err != nil {
		return nil, err
	}
	return b, nil
}
