package backend

import (
	"os"
	"runtime/debug"
)

// ProcessSettings are the process-wide settings a backend configuration asks
// for: the Go garbage collector's target and soft memory limit (the go
// backend's buffers dominate the heap), and whether go-xla may download
// PJRT plugins. New sets none of them; a program applies them once,
// at start-up, before it builds a backend (Apply). The zero value changes
// nothing.
type ProcessSettings struct {
	// GCPercent is the Go GC's target percentage (debug.SetGCPercent);
	// 0 = leave it.
	GCPercent int
	// MemoryLimit is the soft limit on the Go heap in bytes
	// (debug.SetMemoryLimit); 0 = leave it.
	MemoryLimit int64
	// NoXLADownloads turns go-xla's plugin downloads off
	// (xla.EnableAutoInstall(false)).
	NoXLADownloads bool
}

// ProcessSettings returns the process-wide settings c asks for: for the go
// backend, gc_percent unless the GOGC environment variable is set, and
// memory_limit_mb (0: a quarter of the machine's memory) unless GOMEMLIMIT
// is; for xla, no plugin downloads unless auto_install.
func (c *Config) ProcessSettings() ProcessSettings {
	return c.processSettings(os.Getenv, MachineMemory())
}

// processSettings is ProcessSettings with the environment read through
// getenv and the machine's memory given (0 when unknown).
func (c *Config) processSettings(getenv func(string) string, machineMemory int64) ProcessSettings {
	var p ProcessSettings
	switch c.Name {
	case "", "go":
		if c.GCPercent > 0 && getenv("GOGC") == "" {
			p.GCPercent = c.GCPercent
		}
		if c.MemoryLimitMB >= 0 && getenv("GOMEMLIMIT") == "" {
			p.MemoryLimit = int64(c.MemoryLimitMB) << 20
			if p.MemoryLimit == 0 {
				p.MemoryLimit = machineMemory / 4
			}
		}
	case "xla":
		p.NoXLADownloads = !c.AutoInstall
	}
	return p
}

// Apply sets p for the whole process.
func (p ProcessSettings) Apply() {
	if p.GCPercent > 0 {
		debug.SetGCPercent(p.GCPercent)
	}
	if p.MemoryLimit > 0 {
		debug.SetMemoryLimit(p.MemoryLimit) // soft: the GC works harder near it
	}
	if p.NoXLADownloads {
		disableXLADownloads()
	}
}
