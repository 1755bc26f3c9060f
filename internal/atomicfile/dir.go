package atomicfile

import (
	"os"
	"path/filepath"
)

// AsideSuffix ends the name ReplaceDir gives an older directory while it
// moves the new one in ("checkpoint-4" → "checkpoint-4.old").
const AsideSuffix = ".old"

// ReplaceDir moves the complete directory tmp to final (mode 0755) and
// makes the rename durable (SyncDir). An older final is replaced: it is
// renamed aside (final+AsideSuffix, replacing a stale one) first and
// removed last, so a crash leaves one of the two under its name or aside,
// never neither; whoever finds an aside without its final puts it back.
// Without an older final, nothing but tmp and final is touched. tmp must
// be on final's file system, e.g. beside it.
func ReplaceDir(tmp, final string) error {
	aside := final + AsideSuffix
	_, err := os.Stat(final)
	replacing := err == nil
	if replacing {
		os.RemoveAll(aside) // a rename cannot replace a non-empty directory
		if err := os.Rename(final, aside); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		if replacing {
			os.Rename(aside, final)
		}
		return err
	}
	if err := os.Chmod(final, 0o755); err != nil {
		return err
	}
	SyncDir(filepath.Dir(final))
	if replacing {
		return os.RemoveAll(aside)
	}
	return nil
}

// SyncDir makes a rename in dir durable (best effort: errors are ignored).
func SyncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
