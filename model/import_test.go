package model

import (
	"reflect"
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
// gradient (backend.New does; package backend tests that).
func TestImportChangesNothing(t *testing.T) {
	if vjpAtInit == reflect.ValueOf(simplegofast.DotGeneralVJP).Pointer() {
		t.Error("importing model replaced the gradient of DotGeneral")
	}
	if kernelsAtInit {
		t.Error("importing model installed simplego executors")
	}
}
