// Package simplegofast makes GoMLX's pure-Go backend (simplego) fast enough
// to train and evaluate small Qwen3 models on a CPU, with two pieces, each
// installed explicitly and process-wide (importing changes nothing):
//
//   - Install: float32 executors for simplego on amd64 CPUs with AVX2 and
//     FMA — a blocked matrix product (matmul.go, ~15–30× simplego's) and
//     elementwise ops, reductions, broadcasts and an exponential
//     (elementwise.go); anything else goes to simplego's own executor.
//     What they reach of GoMLX's internals is in gomlx.go, checked at
//     install; -tags nofastkernels leaves it out (docs/design.md#upgrading-gomlx).
//   - InstallGradient: DotGeneral's gradient as two matrix products
//     (vjp.go), the same gradient, 11× faster on simplego.
//
// KeepPlain keeps a backend on simplego's own executors (comparisons).
// Results differ from simplego's in the last bits (another summation
// order, fused multiply-adds), as any two BLAS libraries do.
package simplegofast

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
)

// ErrUnsupported is returned (wrapped) by Install on a CPU the kernels do
// not run on; simplego then keeps its own executors, which are correct, only
// slower.
var ErrUnsupported = errors.New("simplegofast: the fast kernels do not run on this CPU")

var (
	installOnce   sync.Once
	installErr    error
	installed     atomic.Bool
	plainBackends sync.Map // *simplego.Backend → true: KeepPlain
)

// Install makes this package's executors simplego's, for every simplego
// backend of the process except those marked with KeepPlain. It runs once;
// later calls return the first call's result. An error wrapping
// ErrUnsupported means the CPU cannot run the kernels; any other error means
// simplego is not the version this package was written for (GoMLX v0.26.0)
// and nothing was installed.
func Install() error {
	installOnce.Do(func() {
		installErr = install()
		installed.Store(installErr == nil)
	})
	return installErr
}

// Installed reports whether Install succeeded.
func Installed() bool { return installed.Load() }

// KeepPlain makes backend (a simplego backend; others are ignored) run
// every op with simplego's own executors.
func KeepPlain(backend backends.Backend) {
	if b, ok := backend.(*simplego.Backend); ok {
		plainBackends.Store(b, true)
	}
}

// Runs reports whether backend's float32 ops run through this package's
// executors: a simplego backend, not kept plain, after a successful Install.
func Runs(backend backends.Backend) bool {
	b, ok := backend.(*simplego.Backend)
	return ok && Installed() && !isPlain(b)
}

// isPlain reports whether backend keeps simplego's own executors.
func isPlain(backend *simplego.Backend) bool {
	_, plain := plainBackends.Load(backend)
	return plain
}

// ExpFloat32 sets dst[i] = exp(x[i]) for i < len(dst) (dst may be x; x holds at
// least len(dst) values), with the AVX2 exponential where the CPU has it
// (relative error ≤ 3e-7 where the result is a normal float32) and math.Exp
// elsewhere. It needs no Install.
func ExpFloat32(dst, x []float32) { expFloat32(dst, x) }
