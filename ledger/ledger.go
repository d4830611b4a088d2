package ledger

import (
	"crypto/rand"
	"encoding/binary"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Options tune a ledger. The zero value takes the defaults.
type Options struct {
	// HalfLife is how long what a peer gave or took takes to count half
	// (default 7 days): an old debt fades, and so does an old favour.
	HalfLife time.Duration
	// Allowance is how much work (tokens of a whole model) a peer may
	// take beyond what it gave before it ranks below peers that owe
	// nothing (default 512): a newcomer's start.
	Allowance float64
	// Window is how old (or how far ahead of this peer's clock) a
	// receipt may be when it arrives (default 10 min); the nonces of the
	// receipts accepted within it are remembered, so none is counted
	// twice.
	Window time.Duration
	// MaxPeers bounds the accounts kept (default 65536): past it, the one
	// touched longest ago goes.
	MaxPeers int
}

func (o Options) withDefaults() Options {
	if o.HalfLife <= 0 {
		o.HalfLife = 7 * 24 * time.Hour
	}
	if o.Allowance <= 0 {
		o.Allowance = 512
	}
	if o.Window <= 0 {
		o.Window = 10 * time.Minute
	}
	if o.MaxPeers <= 0 {
		o.MaxPeers = 65536
	}
	return o
}

// account is what this peer and one other did for each other, decayed
// to At.
type account struct {
	Given float64   `json:"given"` // work this peer did for the other (receipts it signed)
	Taken float64   `json:"taken"` // work the other did for this peer (receipts this peer signed)
	At    time.Time `json:"at"`    // what Given and Taken are decayed to
	First time.Time `json:"first"` // the account's first receipt
	Last  time.Time `json:"last"`  // its latest
	// Seen are the nonces of the other's receipts accepted within the
	// window, with their times.
	Seen map[uint64]int64 `json:"seen,omitempty"`
	// Vouched is the credit others' receipts for the other's work earned
	// it here (vouch.go), at most the allowance; Vouches are those
	// receipts (signer/nonce), with their times.
	Vouched float64          `json:"vouched,omitempty"`
	Vouches map[string]int64 `json:"vouches,omitempty"`
}

// Ledger is one peer's own record of what it gave each peer and took
// from each, from receipts alone: no global state, nothing another peer
// can write but its own signature on work it received.
type Ledger struct {
	self peer.ID
	opts Options
	now  func() time.Time

	mu       sync.Mutex
	acct     map[peer.ID]*account
	vouchers []*Signed // receipts for this peer's work, to present (vouch.go)
	dirty    bool
}

// New is an empty ledger of self.
func New(self peer.ID, o Options) *Ledger {
	return &Ledger{self: self, opts: o.withDefaults(), now: time.Now, acct: map[peer.ID]*account{}}
}

// Options are the ledger's options, defaults filled in.
func (l *Ledger) Options() Options { return l.opts }

// decay brings a to now.
func (l *Ledger) decay(a *account, now time.Time) {
	if dt := now.Sub(a.At); dt > 0 {
		f := math.Exp2(-dt.Seconds() / l.opts.HalfLife.Seconds())
		a.Given *= f
		a.Taken *= f
		a.Vouched *= f
		a.At = now
	}
}

// accountLocked is p's account, made if new.
func (l *Ledger) accountLocked(p peer.ID, now time.Time) *account {
	a := l.acct[p]
	if a == nil {
		if len(l.acct) >= l.opts.MaxPeers {
			l.evictLocked()
		}
		a = &account{At: now, First: now, Last: now}
		l.acct[p] = a
	}
	l.decay(a, now)
	return a
}

func (l *Ledger) evictLocked() {
	var old peer.ID
	var at time.Time
	for p, a := range l.acct {
		if at.IsZero() || a.Last.Before(at) {
			old, at = p, a.Last
		}
	}
	delete(l.acct, old)
}

// Accept checks a receipt a client sent for work this peer did and, if
// it holds, counts its items' work as given to that client. A receipt for
// another server, not the client's signature, out of its time window or
// seen before is refused (ErrBadReceipt), and counts nothing.
func (l *Ledger) Accept(s *Signed) error {
	if s.Server != l.self.String() {
		return bad("a receipt for server %s, not this peer", s.Server)
	}
	if err := s.Verify(); err != nil {
		return err
	}
	now := l.now()
	if d := now.Sub(s.at()); d > l.opts.Window || d < -l.opts.Window {
		return bad("signed %s from now, outside the window of %s", (-d).Round(time.Second), l.opts.Window)
	}
	w := s.Work()
	if !finite(w) || w <= 0 {
		return bad("no work")
	}
	client, _ := peer.Decode(s.Client)
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.accountLocked(client, now)
	for n, at := range a.Seen {
		if now.Sub(time.UnixMilli(at)) > 2*l.opts.Window {
			delete(a.Seen, n)
		}
	}
	if _, dup := a.Seen[s.Nonce]; dup {
		return bad("nonce %d of %s already counted", s.Nonce, short(s.Client))
	}
	if a.Seen == nil {
		a.Seen = map[uint64]int64{}
	}
	a.Seen[s.Nonce] = s.At
	a.Given += w
	a.Last = now
	l.keepVoucherLocked(s)
	l.dirty = true
	return nil
}

// Take counts work server did for this peer as taken; its receipt is
// signed later (Issue), with others for the same server.
func (l *Ledger) Take(server peer.ID, it Item) error {
	if err := it.check(); err != nil {
		return err
	}
	if server == l.self {
		return bad("work this peer did for itself")
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.accountLocked(server, now)
	a.Taken += it.Work()
	a.Last = now
	l.dirty = true
	return nil
}

// Issue signs, with key (this peer's), a receipt of items for server:
// work Take counted. Its time is now and its nonce random.
func (l *Ledger) Issue(server peer.ID, items []Item, key crypto.PrivKey) (*Signed, error) {
	var nb [8]byte
	if _, err := rand.Read(nb[:]); err != nil {
		return nil, err
	}
	return Sign(Receipt{Server: server.String(), Client: l.self.String(), At: l.now().UnixMilli(),
		Nonce: binary.LittleEndian.Uint64(nb[:]), Items: items}, key)
}

// Standing ranks p for contended work, in (-1, 1): above 0 a peer that
// did more for this one than it took, 0 one within its allowance of
// that (a newcomer), below 0 one that took more than its allowance
// beyond what it gave.
func (l *Ledger) Standing(p peer.ID) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.acct[p]
	if a == nil {
		return 0
	}
	l.decay(a, l.now())
	return l.standing(a.Taken + a.Vouched - a.Given)
}

func (l *Ledger) standing(balance float64) float64 {
	score := 0.0
	switch al := l.opts.Allowance; {
	case balance > 0:
		score = balance
	case balance < -al:
		score = balance + al
	}
	return score / (math.Abs(score) + l.opts.Allowance)
}

// Totals are the number of accounts and their given and taken work,
// decayed to now: Snapshot's sums, without building and sorting it.
func (l *Ledger) Totals() (peers int, given, taken float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	for _, a := range l.acct {
		l.decay(a, now)
		given += a.Given
		taken += a.Taken
	}
	return len(l.acct), given, taken
}

// Entry is one peer's account, as Snapshot shows it.
type Entry struct {
	Peer     string    `json:"peer"`
	Given    float64   `json:"given"`    // work this peer did for it
	Taken    float64   `json:"taken"`    // work it did for this peer
	Vouched  float64   `json:"vouched"`  // credit others' receipts for its work earned it (vouch.go)
	Balance  float64   `json:"balance"`  // taken + vouched - given: what this peer owes it
	Standing float64   `json:"standing"` // its rank when work is contended (Standing)
	First    time.Time `json:"first"`
	Last     time.Time `json:"last"`
}

// Snapshot is every account, decayed to now, the largest balances (of
// either sign) first.
func (l *Ledger) Snapshot() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	out := make([]Entry, 0, len(l.acct))
	for p, a := range l.acct {
		l.decay(a, now)
		b := a.Taken + a.Vouched - a.Given
		out = append(out, Entry{Peer: p.String(), Given: a.Given, Taken: a.Taken, Vouched: a.Vouched, Balance: b, Standing: l.standing(b),
			First: a.First, Last: a.Last})
	}
	slices.SortFunc(out, func(x, y Entry) int {
		if d := math.Abs(y.Balance) - math.Abs(x.Balance); d != 0 {
			if d > 0 {
				return 1
			}
			return -1
		}
		if x.Peer < y.Peer {
			return -1
		}
		return 1
	})
	return out
}

func short(id string) string {
	if len(id) > 10 {
		return "…" + id[len(id)-10:]
	}
	return id
}
