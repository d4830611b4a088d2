package shards

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFileCID(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := FileCID(p)
	if err != nil {
		t.Fatal(err)
	}
	// CIDv1 raw sha2-256 of "hello", as computed by `ipfs add --raw-leaves --cid-version 1`.
	const want = "bafkreibm6jg3ux5qumhcn2b3flc3tyu6dmlb4xa7u5bf44yegnrjhc4yeq"
	if c.String() != want {
		t.Fatalf("FileCID = %s, want %s", c, want)
	}
	if _, err := ParseCID(want); err != nil {
		t.Fatal(err)
	}
	if _, err := FileCID(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing file: err = %v", err)
	}
	for _, bad := range []string{"", "nope", "QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG"} {
		if _, err := ParseCID(bad); err == nil {
			t.Errorf("ParseCID(%q) accepted", bad)
		}
	}
}
