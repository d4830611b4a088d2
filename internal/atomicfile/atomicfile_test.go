package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: the file holds the new bytes, only its user may read it, and
// no temporary file is left; a directory that is not there is an error,
// and the old file stays.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ledger.json")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("new")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	fi, _ := os.Stat(p)
	entries, _ := os.ReadDir(dir)
	if err != nil || string(b) != "new" || fi.Mode().Perm() != 0o600 || len(entries) != 1 {
		t.Fatalf("after Write: %q %v, mode %v, %d entries", b, err, fi.Mode(), len(entries))
	}
	if err := Write(filepath.Join(dir, "no", "such.json"), []byte("x")); err == nil {
		t.Fatal("wrote into a directory that is not there")
	}
}
