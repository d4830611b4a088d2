//go:build !unix

package node

import "errors"

// LockFile is the data dir's lock file where locking is supported.
const LockFile = "lock"

// ErrDataDirInUse: another process holds the data dir's lock.
var ErrDataDirInUse = errors.New("node: data dir in use")

// dirLock is a no-op on systems without flock.
type dirLock struct{}

func lockDataDir(string) (*dirLock, error) { return &dirLock{}, nil }
func (l *dirLock) release()                {}
