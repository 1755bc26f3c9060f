package check

import (
	"os"
	"slices"
	"testing"
)

func TestRun(t *testing.T) {
	var order []string
	var dir string
	cases := []struct {
		name  string
		check func(c *T)
		ok    bool
		order []string // what ran, clean-ups last registered first
	}{
		{"passes", func(c *T) { c.Logf("fine") }, true, nil},
		{"Errorf goes on", func(c *T) { c.Errorf("bad"); order = append(order, "after") }, false, []string{"after"}},
		{"Fatalf stops, clean-ups run in reverse", func(c *T) {
			dir = c.TempDir()
			c.Cleanup(func() { order = append(order, "first") })
			c.Cleanup(func() { order = append(order, "second") })
			c.Fatalf("stop")
			order = append(order, "not reached")
		}, false, []string{"second", "first"}},
	}
	for _, tc := range cases {
		order = nil
		if ok := Run(tc.check); ok != tc.ok || !slices.Equal(order, tc.order) {
			t.Errorf("%s: ok %v, ran %v; want %v, %v", tc.name, ok, order, tc.ok, tc.order)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("TempDir %s is still there: %v", dir, err)
	}
}
