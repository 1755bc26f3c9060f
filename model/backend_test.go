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

// The XLA client options: set keys become PJRT named values of the types
// XLA's GPU client reads; unset ones are left out (the CPU client refuses
// names it does not know); bad values are refused with the key.
func TestXLAClientOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		x    XLAClient
		want map[string]any // nil: no options
		err  string
	}{
		{"none", XLAClient{}, nil, ""},
		{"fraction", XLAClient{MemoryFraction: 0.95}, map[string]any{"memory_fraction": float32(0.95)}, ""},
		{"all", XLAClient{MemoryFraction: 0.5, Preallocate: "false", Allocator: "platform"},
			map[string]any{"memory_fraction": float32(0.5), "preallocate": false, "allocator": "platform"}, ""},
		{"preallocate", XLAClient{Preallocate: "true"}, map[string]any{"preallocate": true}, ""},
		{"fraction above 1", XLAClient{MemoryFraction: 1.5}, nil, "xla_memory_fraction must be in (0, 1]"},
		{"negative fraction", XLAClient{MemoryFraction: -0.1}, nil, "xla_memory_fraction"},
		{"preallocate not a bool", XLAClient{Preallocate: "yes"}, nil, "xla_preallocate must be"},
		{"unknown allocator", XLAClient{Allocator: "arena"}, nil, "xla_allocator must be one of"},
	} {
		err := tc.x.Validate()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := tc.x.Options(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: options %#v, want %#v", tc.name, got, tc.want)
		}
	}
	// The backend section checks them too, and ops_sequential is go-only.
	c := DefaultBackendConfig()
	c.MemoryFraction = 2
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "xla_memory_fraction") {
		t.Errorf("backend config with xla_memory_fraction 2: %v", err)
	}
	c = BackendConfig{Name: "xla", OpsSequential: true}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ops_sequential") {
		t.Errorf("ops_sequential with xla: %v", err)
	}
}

// UsableFraction is XLA's CUDA default (0.75) or xla_memory_fraction for a
// CUDA plugin, and 1 elsewhere; DeviceMemory of the go backend is the
// machine's memory.
func TestUsableFractionAndDeviceMemory(t *testing.T) {
	for _, tc := range []struct {
		c    BackendConfig
		want float64
	}{
		{BackendConfig{Name: "go"}, 1},
		{BackendConfig{Name: "xla", Plugin: "cpu"}, 1},
		{BackendConfig{Name: "xla", Plugin: "cuda"}, 0.75},
		{BackendConfig{Name: "xla", Plugin: "/opt/x/xla_cuda_plugin.so", XLAClient: XLAClient{MemoryFraction: 0.95}}, 0.95},
	} {
		if got := tc.c.UsableFraction(); got != tc.want {
			t.Errorf("%+v: usable fraction %v, want %v", tc.c, got, tc.want)
		}
	}
	if n, src := DeviceMemory(BackendConfig{Name: "go"}); n != totalMemory() || (n > 0 && src == "") {
		t.Errorf("go backend: device memory %d (%q), want the machine's %d", n, src, totalMemory())
	}
	if n, _ := DeviceMemory(BackendConfig{Name: "xla", Plugin: "cpu"}); n != 0 {
		t.Errorf("xla cpu plugin: device memory %d, want 0 (unknown)", n)
	}
}
