package grpo

import (
	"os"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
)

// testBackend is the pure-Go backend with parallelism=-1 (GOMLX-NOTES.md: the default
// parallelism can deadlock on 2 cores). Its "parallelism set to" message goes to stderr, not
// stdout.
var testBackend = sync.OnceValues(func() (backends.Backend, error) {
	stdout := os.Stdout
	os.Stdout = os.Stderr
	defer func() { os.Stdout = stdout }()
	return simplego.New("parallelism=-1")
})

func backend(t testing.TB) backends.Backend {
	t.Helper()
	b, err := testBackend()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
