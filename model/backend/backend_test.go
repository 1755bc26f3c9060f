package backend

import (
	"errors"
	"os"
	"reflect"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/mageguard/mageguard/internal/simplegofast"
)

// What the gradient table and the kernels were when the test binary
// started, after every package's initialization: importing backend (and
// everything it imports) must have changed neither.
var (
	vjpAtInit     = reflect.ValueOf(graph.VJPRegistration[graph.NodeTypeDotGeneral]).Pointer()
	kernelsAtInit = simplegofast.Installed()
)

// TestImportChangesNothing: importing backend installs no kernel and no
// gradient; New installs both (the kernels where the CPU runs them).
func TestImportChangesNothing(t *testing.T) {
	ours := reflect.ValueOf(simplegofast.DotGeneralVJP).Pointer()
	if vjpAtInit == ours {
		t.Error("importing backend replaced the gradient of DotGeneral")
	}
	if kernelsAtInit {
		t.Error("importing backend installed simplego executors")
	}
	b, err := New(Default())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Finalize()
	if got := reflect.ValueOf(graph.VJPRegistration[graph.NodeTypeDotGeneral]).Pointer(); got != ours {
		t.Error("New did not install the matmul-based gradient of DotGeneral")
	}
	if err := simplegofast.Install(); err != nil && !errors.Is(err, simplegofast.ErrUnsupported) {
		t.Errorf("Install: %v", err)
	} else if err == nil && !simplegofast.Runs(b) {
		t.Error("the kernels are installed but the default backend does not run them")
	}
}

func TestNew(t *testing.T) {
	b, err := New(Config{Name: "go", Parallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	if b.Name() != "SimpleGo (go)" {
		t.Errorf("backend %q", b.Name())
	}
	b.Finalize()
	if _, err := New(Config{Name: "cuda"}); err == nil || !strings.Contains(err.Error(), "backend must be") {
		t.Errorf("bad name: %v", err)
	}
	// xla with a plugin that does not exist fails cleanly and downloads nothing.
	_, err = New(Config{Name: "xla", Plugin: "/nonexistent/pjrt_c_api_cpu_plugin.so"})
	if err == nil {
		t.Error("xla with a missing plugin: no error")
	}
	// A plugin by name while go-xla's downloads are on is refused, unless auto_install.
	if _, envOff := os.LookupEnv("GOMLX_NO_AUTO_INSTALL"); xlaAvailable && !envOff && !xlaDownloadsOff.Load() {
		_, err = New(Config{Name: "xla", Plugin: "cpu"})
		if err == nil || !strings.Contains(err.Error(), "downloads are on") {
			t.Errorf("xla plugin by name with downloads on: %v", err)
		}
	}
}

// TestNewChangesNoProcessState: building a backend leaves the GC
// percent, the memory limit, os.Stdout and the environment as they were
// (they are ProcessSettings, applied by the program).
func TestNewChangesNoProcessState(t *testing.T) {
	gcPercent := func() int { p := debug.SetGCPercent(100); debug.SetGCPercent(p); return p }
	gc, limit, stdout := gcPercent(), debug.SetMemoryLimit(-1), os.Stdout
	_, envSet := os.LookupEnv("GOMLX_NO_AUTO_INSTALL")
	for _, cfg := range []Config{
		Default(),
		{Name: "go", Parallelism: -1, GCPercent: 50, MemoryLimitMB: 1},
		{Name: "xla", Plugin: "/nonexistent/pjrt_c_api_cpu_plugin.so"},
	} {
		if b, err := New(cfg); err == nil {
			b.Finalize()
		}
		if got := gcPercent(); got != gc {
			t.Errorf("%+v: GC percent %d, was %d", cfg, got, gc)
		}
		if got := debug.SetMemoryLimit(-1); got != limit {
			t.Errorf("%+v: memory limit %d, was %d", cfg, got, limit)
		}
		if os.Stdout != stdout {
			t.Errorf("%+v: os.Stdout replaced", cfg)
		}
		if _, set := os.LookupEnv("GOMLX_NO_AUTO_INSTALL"); set != envSet {
			t.Errorf("%+v: GOMLX_NO_AUTO_INSTALL set: %v, was %v", cfg, set, envSet)
		}
	}
}

// TestProcessSettings: the go backend asks for its GC percent and memory
// limit (0 MiB: a quarter of the machine's memory) unless the environment
// sets GOGC / GOMEMLIMIT; xla asks for no plugin downloads unless
// auto_install.
func TestProcessSettings(t *testing.T) {
	const machine = 8 << 30
	for _, tc := range []struct {
		name string
		cfg  Config
		env  map[string]string
		want ProcessSettings
	}{
		{"default", Default(), nil, ProcessSettings{GCPercent: 400, MemoryLimit: machine / 4}},
		{"GOGC set", Default(), map[string]string{"GOGC": "100"}, ProcessSettings{MemoryLimit: machine / 4}},
		{"GOMEMLIMIT set", Default(), map[string]string{"GOMEMLIMIT": "1GiB"}, ProcessSettings{GCPercent: 400}},
		{"1536 MiB", Config{Name: "go", MemoryLimitMB: 1536}, nil, ProcessSettings{MemoryLimit: 1536 << 20}},
		{"leave both", Config{Name: "go", MemoryLimitMB: -1}, nil, ProcessSettings{}},
		{"xla", Config{Name: "xla", GCPercent: 400}, nil, ProcessSettings{NoXLADownloads: true}},
		{"xla auto_install", Config{Name: "xla", AutoInstall: true, MemoryLimitMB: 5}, nil, ProcessSettings{}},
	} {
		getenv := func(k string) string { return tc.env[k] }
		if got := tc.cfg.processSettings(getenv, machine); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestApplyProcessSettings: Apply sets the GC percent and the memory limit
// it holds, and leaves them when zero.
func TestApplyProcessSettings(t *testing.T) {
	oldGC, oldLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	defer func() { debug.SetGCPercent(oldGC); debug.SetMemoryLimit(oldLimit) }()
	ProcessSettings{GCPercent: 123, MemoryLimit: 3 << 30}.Apply()
	if gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1); gc != 123 || limit != 3<<30 {
		t.Errorf("after Apply: GC percent %d, memory limit %d; want 123, %d", gc, limit, 3<<30)
	}
	ProcessSettings{}.Apply()
	if gc, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1); gc != 100 || limit != 3<<30 {
		t.Errorf("after the zero value: GC percent %d, memory limit %d; want them left (100, %d)", gc, limit, 3<<30)
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
	c := Default()
	c.MemoryFraction = 2
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "xla_memory_fraction") {
		t.Errorf("backend config with xla_memory_fraction 2: %v", err)
	}
	c = Config{Name: "xla", OpsSequential: true}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ops_sequential") {
		t.Errorf("ops_sequential with xla: %v", err)
	}
}

// UsableFraction is XLA's CUDA default (0.75) or xla_memory_fraction for a
// CUDA plugin, and 1 elsewhere; DeviceMemory of the go backend is the
// machine's memory.
func TestUsableFractionAndDeviceMemory(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want float64
	}{
		{Config{Name: "go"}, 1},
		{Config{Name: "xla", Plugin: "cpu"}, 1},
		{Config{Name: "xla", Plugin: "cuda"}, 0.75},
		{Config{Name: "xla", Plugin: "/opt/x/xla_cuda_plugin.so", XLAClient: XLAClient{MemoryFraction: 0.95}}, 0.95},
	} {
		if got := tc.c.UsableFraction(); got != tc.want {
			t.Errorf("%+v: usable fraction %v, want %v", tc.c, got, tc.want)
		}
	}
	if n, src := DeviceMemory(Config{Name: "go"}); n != MachineMemory() || (n > 0 && src == "") {
		t.Errorf("go backend: device memory %d (%q), want the machine's %d", n, src, MachineMemory())
	}
	if n, _ := DeviceMemory(Config{Name: "xla", Plugin: "cpu"}); n != 0 {
		t.Errorf("xla cpu plugin: device memory %d, want 0 (unknown)", n)
	}
}
