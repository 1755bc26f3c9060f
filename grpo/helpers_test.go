package grpo

import (
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"

	modelbackend "github.com/mageguard/mageguard/model/backend"
)

// testBackend is the pure-Go backend as training runs it (model/backend's New:
// parallelism -1, since the default can deadlock on 2 cores, the fast
// kernels and the matmul-based gradient of DotGeneral), after its process
// settings (GC percent, memory limit) are applied as cmd/mageguard does.
var testBackend = sync.OnceValues(func() (backends.Backend, error) {
	cfg := modelbackend.Default()
	cfg.ProcessSettings().Apply()
	return modelbackend.New(cfg)
})

func backend(t testing.TB) backends.Backend {
	t.Helper()
	b, err := testBackend()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
