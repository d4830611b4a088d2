package ledger

import (
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Vouching: a peer that served others is not a stranger where it has
// never served. It may present to a peer the receipts others signed for
// its work (vouchers); the receiver counts those signed by peers it
// trusts (Vouched's trusted: proven, not banned) and has itself given
// to or taken from, at half their work, and never more than the
// allowance in all for one peer. Receipts signed by identities the
// receiver does not know or trust count for nothing, so a peer's sybils
// vouching for it buy it nothing.

// Vouching bounds.
const (
	// VoucherAge is how old a receipt may be to vouch.
	VoucherAge = 7 * 24 * time.Hour
	// MaxVouchers is how many receipts a peer keeps to present, and
	// presents at once.
	MaxVouchers = 16
	// vouchWeight is the share of a voucher's work credited.
	vouchWeight = 0.5
	// maxVouchSeen bounds the vouchers remembered per presenter.
	maxVouchSeen = 256
)

// keepVoucher remembers s, a receipt accepted for this peer's work, as a
// voucher to present: the latest from each client, at most MaxVouchers
// (those of the most work).
func (l *Ledger) keepVoucherLocked(s *Signed) {
	l.vouchers = slices.DeleteFunc(l.vouchers, func(v *Signed) bool { return v.Client == s.Client })
	l.vouchers = append(l.vouchers, s)
	if len(l.vouchers) > MaxVouchers {
		slices.SortFunc(l.vouchers, func(a, b *Signed) int {
			switch wa, wb := a.Work(), b.Work(); {
			case wa > wb:
				return -1
			case wa < wb:
				return 1
			}
			return 0
		})
		l.vouchers = l.vouchers[:MaxVouchers]
	}
}

// Vouchers are the receipts this peer keeps to present: others'
// acknowledgements of its work, younger than VoucherAge.
func (l *Ledger) Vouchers() []*Signed {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var out []*Signed
	for _, v := range l.vouchers {
		if now.Sub(v.at()) <= VoucherAge {
			out = append(out, v)
		}
	}
	return out
}

// Vouched credits from with the vouchers it presented: receipts for its
// own work (server from), signed by a peer trusted says is trusted and
// that has an account here, younger than VoucherAge, not presented
// before. Each counts vouchWeight of its work, and all of from's never
// more than the allowance. It returns the credit and why each voucher
// not counted was refused.
func (l *Ledger) Vouched(from peer.ID, vs []*Signed, trusted func(peer.ID) bool) (float64, map[int]string) {
	refused := map[int]string{}
	now := l.now()
	type ok struct {
		i    int // in vs
		key  string
		work float64
		at   int64
	}
	var good []ok
	for i, v := range vs {
		c, _ := peer.Decode(v.Client)
		switch err := v.Verify(); {
		case err != nil:
			refused[i] = err.Error()
		case v.Server != from.String():
			refused[i] = fmt.Sprintf("a receipt for %s's work, presented by %s", short(v.Server), short(from.String()))
		case c == l.self:
			refused[i] = "this peer's own receipt: counted when it was sent"
		case now.Sub(v.at()) > VoucherAge || v.at().After(now.Add(l.opts.Window)):
			refused[i] = fmt.Sprintf("signed %s ago (at most %s)", now.Sub(v.at()).Round(time.Second), VoucherAge)
		case trusted == nil || !trusted(c):
			refused[i] = fmt.Sprintf("signed by %s, which this peer does not trust", short(v.Client))
		default:
			good = append(good, ok{i: i, key: fmt.Sprintf("%s/%d", v.Client, v.Nonce), work: vouchWeight * v.Work(), at: v.At})
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var credit float64
	a := l.accountLocked(from, now)
	for _, g := range good {
		i := g.i
		signer, _ := peer.Decode(vs[i].Client)
		if o := l.acct[signer]; o == nil || o.Given+o.Taken <= 0 {
			refused[i] = fmt.Sprintf("signed by %s, which never gave to or took from this peer", short(vs[i].Client))
			continue
		}
		if _, dup := a.Vouches[g.key]; dup {
			refused[i] = "presented before"
			continue
		}
		if a.Vouches == nil {
			a.Vouches = map[string]int64{}
		}
		if len(a.Vouches) >= maxVouchSeen {
			oldest := ""
			for k, at := range a.Vouches {
				if oldest == "" || at < a.Vouches[oldest] {
					oldest = k
				}
			}
			delete(a.Vouches, oldest)
		}
		a.Vouches[g.key] = g.at
		w := min(g.work, l.opts.Allowance-a.Vouched)
		if w <= 0 {
			refused[i] = fmt.Sprintf("the vouched credit of %s is at its bound (%g)", short(from.String()), l.opts.Allowance)
			continue
		}
		a.Vouched += w
		credit += w
	}
	if credit > 0 {
		a.Last = now
		l.dirty = true
	}
	return credit, refused
}
