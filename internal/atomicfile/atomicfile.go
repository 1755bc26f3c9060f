// Package atomicfile writes files so that a reader — or a crash — sees
// either the old file or the whole new one, never a part: the data goes to
// a temporary file beside the target, is synced, and is renamed into place.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// File is a file being written under a temporary name.
type File struct {
	path string
	f    *os.File
	perm os.FileMode
	done bool
}

// Create starts writing path (mode 0644) through a temporary file in the
// same directory. Call Commit to publish it, or Abort to discard it.
func Create(path string) (*File, error) {
	return CreateMode(path, 0o644)
}

// CreateMode is Create with the given permissions.
func CreateMode(path string, perm os.FileMode) (*File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &File{path: path, f: f, perm: perm}, nil
}

// Write writes to the temporary file.
func (a *File) Write(p []byte) (int, error) { return a.f.Write(p) }

// Path is the target path.
func (a *File) Path() string { return a.path }

// Commit syncs and closes the temporary file and renames it to the target.
// On error the temporary file is removed and the target is untouched.
func (a *File) Commit() error {
	if a.done {
		return fmt.Errorf("write %s: already committed or aborted", a.path)
	}
	a.done = true
	err := a.f.Chmod(a.perm)
	if err == nil {
		err = a.f.Sync()
	}
	if cerr := a.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(a.f.Name(), a.path)
	}
	if err != nil {
		os.Remove(a.f.Name())
		return fmt.Errorf("write %s: %w", a.path, err)
	}
	return nil
}

// Abort removes the temporary file; the target is untouched. It is a no-op
// after Commit.
func (a *File) Abort() {
	if a.done {
		return
	}
	a.done = true
	a.f.Close()
	os.Remove(a.f.Name())
}

// WriteFile writes data to path atomically, with mode 0644.
func WriteFile(path string, data []byte) error {
	return WriteFileMode(path, data, 0o644)
}

// WriteFileMode writes data to path atomically, with the given mode.
func WriteFileMode(path string, data []byte, perm os.FileMode) error {
	f, err := CreateMode(path, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Abort()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Commit()
}
