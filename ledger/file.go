package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/atomicfile"
	"github.com/llmswarm/llmswarm/internal/wire"
)

// fileVersion is the ledger file's format.
const fileVersion = 1

// maxFile bounds the ledger file read back (MaxPeers accounts of a few
// hundred bytes, and their nonces).
const maxFile = 256 << 20

type file struct {
	Version  int                 `json:"version"`
	Self     string              `json:"self"`
	Saved    time.Time           `json:"saved"`
	Accounts map[string]*account `json:"accounts"`
	// Vouchers are receipts for this peer's work, to present (vouch.go),
	// as the receipt protocol carries them.
	Vouchers [][]byte `json:"vouchers,omitempty"`
}

// Load reads a ledger of self from path; a missing file is an empty
// ledger. A file of another peer, another format or malformed is an error
// naming it: the ledger is never silently reset.
func Load(path string, self peer.ID, o Options) (*Ledger, error) {
	l := New(self, o)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return l, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("ledger: %s: %d bytes, at most %d", path, len(b), maxFile)
	}
	var f file
	if err := wire.DecodeJSON(b, &f); err != nil {
		return nil, fmt.Errorf("ledger: %s: %w", path, err)
	}
	if f.Version != fileVersion {
		return nil, fmt.Errorf("ledger: %s: format %d, this peer reads %d", path, f.Version, fileVersion)
	}
	if f.Self != self.String() {
		return nil, fmt.Errorf("ledger: %s is the ledger of %s, not of this peer %s", path, f.Self, self)
	}
	for k, a := range f.Accounts {
		p, err := peer.Decode(k)
		if err != nil || a == nil || !finite(a.Given) || !finite(a.Taken) || a.Given < 0 || a.Taken < 0 {
			return nil, fmt.Errorf("ledger: %s: account %q is malformed", path, k)
		}
		l.acct[p] = a
	}
	for i, b := range f.Vouchers {
		v, err := decodeSigned(b)
		if err != nil || v.Server != self.String() || len(l.vouchers) >= MaxVouchers {
			return nil, fmt.Errorf("ledger: %s: voucher %d is malformed, not for this peer, or one too many: %v", path, i, err)
		}
		l.vouchers = append(l.vouchers, v)
	}
	return l, nil
}

// Save writes the ledger to path (atomically: a crash leaves the old file
// or the new one) if it changed since the last Save.
func (l *Ledger) Save(path string) error {
	l.mu.Lock()
	if !l.dirty {
		l.mu.Unlock()
		return nil
	}
	f := file{Version: fileVersion, Self: l.self.String(), Saved: l.now(), Accounts: map[string]*account{}}
	for p, a := range l.acct {
		f.Accounts[p.String()] = a
	}
	for _, v := range l.vouchers {
		f.Vouchers = append(f.Vouchers, v.wire())
	}
	b, err := json.Marshal(&f) // under the lock: the accounts change under Accept
	l.dirty = false
	l.mu.Unlock()
	if err == nil {
		err = atomicfile.Write(path, b)
	}
	if err != nil {
		l.mu.Lock()
		l.dirty = true
		l.mu.Unlock()
		return fmt.Errorf("ledger: saving %s: %w", path, err)
	}
	return nil
}
