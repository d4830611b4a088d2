//go:build !unix

package shards

// DiskFree is unknown off Unix.
func DiskFree(dir string) (free int64, ok bool) { return 0, false }
