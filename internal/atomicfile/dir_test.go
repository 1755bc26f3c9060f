package atomicfile

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestReplaceDir: a new directory takes final's name, whether an older
// one was there (it is gone, nothing left aside) or not (a directory named
// like an aside that is not one is left alone); a failed move puts the
// older directory back under its name.
func TestReplaceDir(t *testing.T) {
	mkdir := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(path, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path, "f"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	content := func(path string) string {
		data, _ := os.ReadFile(filepath.Join(path, "f"))
		return string(data)
	}
	names := func(dir string) []string {
		entries, _ := os.ReadDir(dir)
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		old, user bool // an older final; a user's final+".old" (only without an older final)
		want      []string
	}{
		{"new", false, false, []string{"ckpt"}},
		{"replacing", true, false, []string{"ckpt"}},
		{"new beside a user's .old", false, true, []string{"ckpt", "ckpt.old"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			final, tmp := filepath.Join(dir, "ckpt"), filepath.Join(dir, ".ckpt.tmp")
			if tc.old {
				mkdir(final, "old")
			}
			if tc.user {
				mkdir(final+AsideSuffix, "user")
			}
			mkdir(tmp, "new")
			if err := ReplaceDir(tmp, final); err != nil {
				t.Fatal(err)
			}
			if got := names(dir); !slices.Equal(got, tc.want) {
				t.Fatalf("left %v, want %v", got, tc.want)
			}
			if content(final) != "new" {
				t.Fatalf("final holds %q, want the new directory", content(final))
			}
			if st, _ := os.Stat(final); st.Mode().Perm() != 0o755 {
				t.Fatalf("mode %v, want 0755", st.Mode().Perm())
			}
			if tc.user && content(final+AsideSuffix) != "user" {
				t.Fatal("a directory that was not an aside was touched")
			}
		})
	}
	t.Run("failed move", func(t *testing.T) {
		dir := t.TempDir()
		final := filepath.Join(dir, "ckpt")
		mkdir(final, "old")
		if err := ReplaceDir(filepath.Join(dir, "missing"), final); err == nil {
			t.Fatal("moved a missing directory")
		}
		if got := names(dir); !slices.Equal(got, []string{"ckpt"}) || content(final) != "old" {
			t.Fatalf("left %v holding %q, want the older ckpt back", got, content(final))
		}
	})
}
