package simplegofast

import (
	"errors"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
)

var (
	testOnce          sync.Once
	testFast, testPln backends.Backend
	testErr           error
)

// testBackends returns two simplego backends for the package's tests, made
// once: fast, after Install (this package's executors where the CPU runs
// them), and plain, kept with simplego's own executors. A failed Install
// other than ErrUnsupported fails the test.
func testBackends(t testing.TB) (fast, plain backends.Backend) {
	t.Helper()
	testOnce.Do(func() {
		if err := Install(); err != nil && !errors.Is(err, ErrUnsupported) {
			testErr = err
			return
		}
		InstallGradient()
		if testFast, testErr = simplego.New("parallelism=-1"); testErr != nil {
			return
		}
		if testPln, testErr = simplego.New("parallelism=-1"); testErr != nil {
			return
		}
		KeepPlain(testPln)
	})
	if testErr != nil {
		t.Fatal(testErr)
	}
	return testFast, testPln
}
