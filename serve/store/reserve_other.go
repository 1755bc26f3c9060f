//go:build !linux

package store

import (
	"errors"
	"os"
)

// allocate has no fallocate here: the caller writes the bytes.
func allocate(f *os.File, n int64) error { return errors.ErrUnsupported }
