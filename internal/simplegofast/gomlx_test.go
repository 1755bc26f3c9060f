//go:build !nofastkernels

package simplegofast

import (
	"os"
	"regexp"
	"testing"
)

// TestGoMLXInternals: simplego's nodes read as gomlx.go expects, and the
// GoMLX built in is the version it was written for; a failure names the
// version found.
func TestGoMLXInternals(t *testing.T) {
	if err := checkGoMLX(); err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/gomlx/gomlx (v\S+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod requires no github.com/gomlx/gomlx")
	}
	if v := string(m[1]); v != writtenFor {
		t.Fatalf("go.mod requires GoMLX %s, gomlx.go reads the internals of %s: check them (docs/design.md#upgrading-gomlx) and update writtenFor", v, writtenFor)
	}
}
