// Package atomicfile writes files so that a reader — or a crash — sees
// either the old file or the whole new one, never a part: the data goes to
// a temporary file beside the target, is synced, and is renamed into place;
// the directory is then synced, so that the rename survives a power loss.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

// Commit syncs and closes the temporary file, renames it to the target and
// syncs the directory (SyncDir), so that the new file, not the old one or
// none, is what a crash after Commit leaves. On error the temporary file
// is removed and the target is untouched.
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
	syncDir(filepath.Dir(a.path))
	return nil
}

// syncDir is SyncDir; the tests record its calls.
var syncDir = SyncDir

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

// staleName matches the temporary names this package (and model.Save's
// temporary checkpoint folders) give: "." + the target's name + ".tmp-" +
// the random digits of os.CreateTemp / os.MkdirTemp.
var staleName = regexp.MustCompile(`^\..+\.tmp-[0-9]+$`)

// IsTemp reports whether name (a base name) is one of the temporary names
// Create gives, or a temporary folder named the same way.
func IsTemp(name string) bool { return staleName.MatchString(name) }

// RemoveStale removes the temporary files and folders that writers killed
// mid-write left in dir (not in its subfolders), and returns their names.
// Call it only while holding dir's lock (package internal/lock): a
// running writer's temporary file looks the same.
func RemoveStale(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("clean %s: %w", dir, err)
	}
	var removed []string
	for _, e := range entries {
		if !IsTemp(e.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return removed, fmt.Errorf("clean %s: %w", dir, err)
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}
