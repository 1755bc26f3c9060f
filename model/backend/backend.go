// Package backend builds the GoMLX backend a model runs on from the
// backend keys of the model section (model.backend, model.plugin,
// model.parallelism, ...; Config), and says which process-wide settings
// those keys ask for (ProcessSettings) and how much memory the device has
// (DeviceMemory, UsableFraction). It knows nothing of the model itself:
// package model embeds Config in its Settings, and programs call New.
package backend

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"

	"github.com/mageguard/mageguard/internal/simplegofast"
)

// Config picks the GoMLX backend that runs the model.
type Config struct {
	Name        string `yaml:"backend"`      // "go" (pure Go, the default) or "xla" (PJRT plugins: CPU, CUDA, TPU)
	Plugin      string `yaml:"plugin"`       // xla only: plugin name (e.g. "cuda", "cpu") or absolute path to a pjrt_c_api_*_plugin.so
	Parallelism int    `yaml:"parallelism"`  // go only: worker goroutines; -1 = unlimited (measured not to deadlock on 2 cores), 0 = sequential
	AutoInstall bool   `yaml:"auto_install"` // xla only: let go-xla download missing plugins (off: nothing is fetched at run time; a process setting, ProcessSettings)
	// go only: run every op with simplego's own code instead of the AVX2
	// matrix product and float32 elementwise ops of internal/simplegofast;
	// slower, for comparison.
	SimpleGoOps bool `yaml:"simplego_ops"`
	// go only: the Go garbage collector's target percentage (GOGC), a
	// process setting (ProcessSettings) unless the GOGC environment variable
	// is set; 0 = leave it.
	GCPercent int `yaml:"gc_percent"`
	// go only: a soft limit on the Go heap in MiB (GOMEMLIMIT), a process
	// setting (ProcessSettings) unless the GOMEMLIMIT environment variable
	// is set; -1 = leave it, 0 = a quarter of the machine's memory. The GC
	// then collects the backend's short-lived vocabulary-sized buffers
	// before they pile up.
	MemoryLimitMB int `yaml:"memory_limit_mb"`
	// go only: run a graph's ops one at a time in program order (simplego's
	// ops_sequential; each matrix product still uses every core). The
	// default scheduler runs every op whose inputs are ready, which starts
	// backward ops early and holds about twice the activations
	// (docs/real-use.md); in program order a training step holds what
	// `mageguard plan` counts.
	OpsSequential bool `yaml:"ops_sequential"`
	XLAClient     `yaml:",inline"`
}

// XLAClient holds the options of the PJRT client the xla backend creates
// (the keys JAX sets from XLA_PYTHON_CLIENT_MEM_FRACTION,
// XLA_PYTHON_CLIENT_PREALLOCATE and XLA_PYTHON_CLIENT_ALLOCATOR). A zero
// value leaves the plugin's default; the go backend ignores them.
type XLAClient struct {
	// MemoryFraction is the share of the device's memory the client's
	// allocator may use, in (0, 1]; 0 = the plugin's default (0.75 for
	// XLA's CUDA client, which preallocates it).
	MemoryFraction float64 `yaml:"xla_memory_fraction"`
	// Preallocate reserves MemoryFraction of the device at start
	// ("true"), or grows the allocator as needed ("false"); "" = the
	// plugin's default (true for CUDA).
	Preallocate string `yaml:"xla_preallocate"`
	// Allocator is the device allocator: "default", "bfc", "platform"
	// (allocate and free each buffer exactly; slow, for measuring) or
	// "cuda_async"; "" = the plugin's default.
	Allocator string `yaml:"xla_allocator"`
}

// xlaAllocators are the allocator names XLA's GPU client accepts.
var xlaAllocators = []string{"default", "bfc", "platform", "cuda_async"}

// Validate checks the options; errors start with the key.
func (x *XLAClient) Validate() error {
	if !(x.MemoryFraction >= 0 && x.MemoryFraction <= 1) {
		return fmt.Errorf("xla_memory_fraction must be in (0, 1] (0 = the plugin's default), got %v", x.MemoryFraction)
	}
	if x.Preallocate != "" && x.Preallocate != "true" && x.Preallocate != "false" {
		return fmt.Errorf("xla_preallocate must be \"true\", \"false\" or \"\" (the plugin's default), got %q", x.Preallocate)
	}
	if x.Allocator != "" && !slices.Contains(xlaAllocators, x.Allocator) {
		return fmt.Errorf("xla_allocator must be one of %s or \"\" (the plugin's default), got %q", strings.Join(xlaAllocators, ", "), x.Allocator)
	}
	return nil
}

// Options returns the PJRT client options (named values: float32, bool,
// string) of the settings that are set; nil when none is, so a plugin that
// knows none of them (XLA's CPU client refuses unknown ones) gets none.
func (x *XLAClient) Options() map[string]any {
	opts := map[string]any{}
	if x.MemoryFraction > 0 {
		opts["memory_fraction"] = float32(x.MemoryFraction)
	}
	if x.Preallocate != "" {
		opts["preallocate"] = x.Preallocate == "true"
	}
	if x.Allocator != "" {
		opts["allocator"] = x.Allocator
	}
	if len(opts) == 0 {
		return nil
	}
	return opts
}

// Default is the pure-Go backend with unlimited parallelism,
// and as its process settings (ProcessSettings) GC percent 400 and a soft
// heap limit of a quarter of the machine's memory: the backend allocates large short-lived buffers at every op, and
// collecting less often cut a training step's CPU time by 15–25%
// (BenchmarkTrainStep, GOGC 400 against 100), while the limit keeps the
// garbage from piling up (the CPU demo peaked at 18 GB without it, 4.4 GB
// with a 4 GiB limit, and ran faster).
func Default() Config {
	return Config{Name: "go", Parallelism: -1, GCPercent: 400}
}

// Validate checks the backend name. Errors start with the key.
func (c *Config) Validate() error {
	if c.GCPercent < 0 {
		return fmt.Errorf("gc_percent must be >= 0 (0 = leave Go's setting), got %d", c.GCPercent)
	}
	if err := c.XLAClient.Validate(); err != nil {
		return err
	}
	if c.Parallelism < -1 {
		return fmt.Errorf("parallelism must be >= -1 (-1 = unlimited, 0 = sequential), got %d", c.Parallelism)
	}
	if c.MemoryLimitMB < -1 || int64(c.MemoryLimitMB) > math.MaxInt64>>20 {
		return fmt.Errorf("memory_limit_mb must be >= -1 (-1 = leave Go's setting, 0 = a quarter of the machine's memory), got %d", c.MemoryLimitMB)
	}
	switch c.Name {
	case "", "go":
		if c.Plugin != "" {
			return fmt.Errorf("plugin is only used by backend xla, got %q with backend %q", c.Plugin, c.Name)
		}
	case "xla":
		if c.SimpleGoOps {
			return fmt.Errorf("simplego_ops is only used by backend go, got it with backend xla")
		}
		if c.OpsSequential {
			return fmt.Errorf("ops_sequential is only used by backend go, got it with backend xla")
		}
		if !xlaAvailable {
			return fmt.Errorf("backend: xla is not compiled into this binary (built with -tags noxla)")
		}
	default:
		return fmt.Errorf("backend must be \"go\" or \"xla\", got %q", c.Name)
	}
	return nil
}

// MachineMemory returns the machine's memory in bytes (0 when unknown).
func MachineMemory() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

// DeviceMemory returns the memory of the device cfg's backend computes on
// and where that figure comes from, or 0 when it is not known: for "go",
// the machine's memory (/proc/meminfo); for "xla" with a CUDA plugin, the
// total memory of GPU 0 as nvidia-smi reports it (GoMLX v0.26 does not
// expose PJRT's device memory statistics); otherwise 0.
func DeviceMemory(cfg Config) (bytes int64, source string) {
	switch {
	case cfg.Name == "" || cfg.Name == "go":
		if n := MachineMemory(); n > 0 {
			return n, "the machine's memory (/proc/meminfo)"
		}
	case isCUDAPlugin(cfg.Plugin):
		out, err := exec.Command("nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "--id=0").Output()
		if err != nil {
			return 0, ""
		}
		var mib int64
		if _, err := fmt.Sscan(strings.TrimSpace(string(out)), &mib); err != nil || mib <= 0 {
			return 0, ""
		}
		return mib << 20, "GPU 0's memory (nvidia-smi)"
	}
	return 0, ""
}

// xlaCUDAMemoryFraction is the share of the GPU that XLA's CUDA client
// allocates unless xla_memory_fraction says otherwise.
const xlaCUDAMemoryFraction = 0.75

// UsableFraction is the share of the device's memory the backend's
// allocator lets a run use: xla_memory_fraction (0.75 by default) for a
// CUDA plugin, all of it otherwise.
func (c *Config) UsableFraction() float64 {
	if c.Name != "xla" || !isCUDAPlugin(c.Plugin) {
		return 1
	}
	if c.MemoryFraction > 0 {
		return c.MemoryFraction
	}
	return xlaCUDAMemoryFraction
}

// isCUDAPlugin reports whether a plugin name or path names a CUDA plugin.
func isCUDAPlugin(plugin string) bool {
	return strings.Contains(strings.ToLower(filepath.Base(plugin)), "cuda")
}

// New creates the backend described by cfg. It is what installs
// internal/simplegofast's pieces, which are process-wide (importing this
// package changes nothing): for every backend, the matmul-based gradient of
// DotGeneral (simplegofast.InstallGradient); for "go", the fast float32
// executors (simplegofast.Install; on a CPU without AVX2 and FMA simplego
// keeps its own, correct but slower). It changes no other process-wide
// state: the GC percent, the memory limit and go-xla's plugin downloads
// that cfg asks for are cfg.ProcessSettings, which a program applies once,
// at start-up.
//
// "go": the pure-Go simplego backend with cfg.Parallelism workers and the
// fast executors unless cfg.SimpleGoOps. simplego prints "SimpleGo
// backend: parallelism set to N" on os.Stdout when given a parallelism
// (cmd/mageguard points os.Stdout at stderr for that reason).
//
// "xla": a PJRT plugin, by name or absolute path, its client created with
// cfg.XLAClient's options. Unless cfg.AutoInstall, a plugin given by name
// needs go-xla's downloads turned off first (ProcessSettings.Apply, or
// GOMLX_NO_AUTO_INSTALL in the environment): New refuses it
// otherwise rather than let go-xla fetch one.
func New(cfg Config) (backends.Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("model backend: %w", err)
	}
	simplegofast.InstallGradient()
	switch cfg.Name {
	case "", "go":
		if !cfg.SimpleGoOps { // simplego's own executors need nothing of simplegofast
			if err := simplegofast.Install(); err != nil && !errors.Is(err, simplegofast.ErrUnsupported) {
				return nil, fmt.Errorf("model backend go: %w (model.simplego_ops: true runs simplego's own executors)", err)
			}
		}
		spec := fmt.Sprintf("parallelism=%d", cfg.Parallelism)
		if cfg.OpsSequential {
			spec += ",ops_sequential"
		}
		b, err := simplego.New(spec)
		if err != nil {
			return nil, fmt.Errorf("model backend go (%s): %w", spec, err)
		}
		if cfg.SimpleGoOps {
			simplegofast.KeepPlain(b)
		}
		return b, nil
	default: // "xla", checked by Validate
		b, err := newXLABackend(cfg.Plugin, cfg.AutoInstall, cfg.XLAClient.Options())
		if err != nil {
			return nil, fmt.Errorf("model backend xla (plugin %q): %w", cfg.Plugin, err)
		}
		return b, nil
	}
}
