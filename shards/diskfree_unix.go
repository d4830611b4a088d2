//go:build unix

package shards

import "syscall"

// DiskFree is the space an unprivileged writer has left on the file system
// holding dir; ok is false where it cannot be read.
func DiskFree(dir string) (free int64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
