//go:build nofastkernels

package simplegofast

// Built with -tags nofastkernels: nothing of GoMLX's internals is compiled
// (no go:linkname, no field offsets: gomlx.go), Install refuses and
// simplego runs every op with its own executors. The way to build against
// a GoMLX whose internals changed until gomlx.go is brought up to date.

import (
	"fmt"
	"sync/atomic"
)

// install refuses: built without the fast executors.
func install() error {
	return fmt.Errorf("%w: built with -tags nofastkernels", ErrUnsupported)
}

// fastKernelsBuilt: the executors are not compiled in.
const fastKernelsBuilt = false

// fastMatmulCalls and fastOpCalls stay 0.
var fastMatmulCalls, fastOpCalls atomic.Int64
