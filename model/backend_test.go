package model

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/mageguard/mageguard/internal/simplegofast"
)

// What the gradient table and the kernels were when the test binary
// started, after every package's initialization: importing model (and
// everything it imports) must have changed neither.
var (
	vjpAtInit     = reflect.ValueOf(graph.VJPRegistration[graph.NodeTypeDotGeneral]).Pointer()
	kernelsAtInit = simplegofast.Installed()
)

// TestImportChangesNothing: importing model installs no kernel and no
// gradient; NewBackend installs both (the kernels where the CPU runs them).
func TestImportChangesNothing(t *testing.T) {
	ours := reflect.ValueOf(simplegofast.DotGeneralVJP).Pointer()
	if vjpAtInit == ours {
		t.Error("importing model replaced the gradient of DotGeneral")
	}
	if kernelsAtInit {
		t.Error("importing model installed simplego executors")
	}
	b, err := NewBackend(DefaultBackendConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Finalize()
	if got := reflect.ValueOf(graph.VJPRegistration[graph.NodeTypeDotGeneral]).Pointer(); got != ours {
		t.Error("NewBackend did not install the matmul-based gradient of DotGeneral")
	}
	if err := simplegofast.Install(); err != nil && !errors.Is(err, simplegofast.ErrUnsupported) {
		t.Errorf("Install: %v", err)
	} else if err == nil && !simplegofast.Runs(b) {
		t.Error("the kernels are installed but the default backend does not run them")
	}
}

func TestNewBackend(t *testing.T) {
	// simplego announces its parallelism on stdout: NewBackend must keep stdout clean.
	f, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = f
	b, err := NewBackend(BackendConfig{Name: "go", Parallelism: 1})
	os.Stdout = saved
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := f.Stat(); info.Size() != 0 {
		t.Errorf("NewBackend wrote %d bytes to stdout", info.Size())
	}
	if b.Name() != "SimpleGo (go)" {
		t.Errorf("backend %q", b.Name())
	}
	b.Finalize()
	if _, err := NewBackend(BackendConfig{Name: "cuda"}); err == nil || !strings.Contains(err.Error(), "backend must be") {
		t.Errorf("bad name: %v", err)
	}
	// xla with a plugin that does not exist fails cleanly and downloads nothing.
	_, err = NewBackend(BackendConfig{Name: "xla", Plugin: "/nonexistent/pjrt_c_api_cpu_plugin.so"})
	if err == nil {
		t.Error("xla with a missing plugin: no error")
	}
	if xlaAvailable && os.Getenv("GOMLX_NO_AUTO_INSTALL") == "" {
		t.Error("GOMLX_NO_AUTO_INSTALL not set by NewBackend")
	}
}
