// Package atomicfile writes a file so that a crash leaves the old file or
// the new one, never a part: the bytes go to a temporary file in the same
// directory, synced, which then takes the file's name.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with b, readable by this user only.
func Write(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, nothing is there
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
