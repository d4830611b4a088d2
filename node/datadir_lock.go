//go:build unix

package node

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile, in the data dir, is locked (flock) by the peer using the dir
// and holds its PID. The kernel drops the lock when the process dies, so a
// stale file never blocks a start.
const LockFile = "lock"

// ErrDataDirInUse: another process holds the data dir's lock.
var ErrDataDirInUse = errors.New("node: data dir in use")

// dirLock is the exclusive lock on a data dir, held while the peer runs:
// two peers on one dir would share an identity and the store, and one's exit
// would delete the other's api.addr.
type dirLock struct{ f *os.File }

// lockDataDir takes dir's lock or fails with ErrDataDirInUse, naming the
// holder's PID.
func lockDataDir(dir string) (*dirLock, error) {
	p := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir lock %s: %w", p, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir lock %s: %w", p, err)
		}
		b, _ := io.ReadAll(io.LimitReader(f, 32))
		holder := "another process"
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			holder = fmt.Sprintf("swarmd pid %d", pid)
		}
		return nil, fmt.Errorf("%w: %s is used by %s (lock %s); stop it, or give this peer its own data dir (--data)",
			ErrDataDirInUse, dir, holder, p)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("data dir lock %s: %w", p, err)
	}
	return &dirLock{f: f}, nil
}

// release drops the lock. The file stays: removing it would let a peer
// starting now lock a file that the next one no longer sees.
func (l *dirLock) release() {
	if l == nil || l.f == nil {
		return
	}
	l.f.Truncate(0)
	l.f.Close()
	l.f = nil
}
