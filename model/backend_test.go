package model

import (
	"os"
	"strings"
	"testing"
)

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
