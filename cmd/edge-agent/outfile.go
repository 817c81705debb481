package main

import (
	"os"
	"path/filepath"
)

// outFile is an export's output, written under a temporary name beside
// its path and renamed to it only once complete: an export that fails,
// or finds nothing, leaves no file (not even an empty one) and never
// half-overwrites an earlier export.
type outFile struct {
	*os.File
	path string
}

// createOut starts the output file of path.
func createOut(path string) (*outFile, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &outFile{f, path}, nil
}

// commit closes the file and renames it into place.
func (f *outFile) commit() error {
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), f.path)
}

// abort closes and removes the file; safe after commit (then a no-op
// but for the close error it ignores).
func (f *outFile) abort() {
	f.Close()
	os.Remove(f.Name())
}
