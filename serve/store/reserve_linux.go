package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// allocate gives f n bytes of disk (fallocate).
func allocate(f *os.File, n int64) error { return unix.Fallocate(int(f.Fd()), 0, 0, n) }
