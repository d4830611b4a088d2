package nat

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	ma "github.com/multiformats/go-multiaddr"
)

// observedAddrs is this peer's address as others see it, from identify's
// observed address: what hole punching tells the other side to dial. Each
// observer is a claim, not a fact, so:
//   - a connection counts once (its first identify; later pushes on it
//     change nothing),
//   - an observer network (a /24, or an IPv6 /48) has one vote, its
//     latest, so one peer cannot fill the table with made-up addresses,
//   - an address two or more observer networks agree on hides those
//     seen by one only.
type observedAddrs struct {
	mu    sync.Mutex
	votes map[netip.Prefix]vote // observer network -> its latest vote
	conns map[string]bool       // connections already heard from
}

type vote struct {
	addr ma.Multiaddr
	at   time.Time
}

const (
	observedFor     = 30 * time.Minute // a vote older than this no longer counts
	maxObserverNets = 256
	maxObservedConn = 4096
	maxPunchAddrs   = 4 // addresses sent to a peer we punch with
)

func newObservedAddrs() *observedAddrs {
	return &observedAddrs{votes: map[netip.Prefix]vote{}, conns: map[string]bool{}}
}

// observerNet is the network an observer's vote stands for.
func observerNet(ip netip.Addr) netip.Prefix {
	bits := 24
	if ip.Is6() && !ip.Is4In6() {
		bits = 48
	}
	n, _ := ip.Unmap().Prefix(bits)
	return n
}

// add records that the peer at observer, on connection conn, sees this
// peer at addr.
func (o *observedAddrs) add(conn string, observer netip.Addr, addr ma.Multiaddr, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conns[conn] || len(o.conns) >= maxObservedConn {
		return
	}
	o.conns[conn] = true
	o.votes[observerNet(observer)] = vote{addr: addr, at: now}
	if len(o.votes) > maxObserverNets {
		var oldest netip.Prefix
		for n, v := range o.votes {
			if !oldest.IsValid() || v.at.Before(o.votes[oldest].at) {
				oldest = n
			}
		}
		delete(o.votes, oldest)
	}
}

// forget drops a closed connection (its vote stays until it ages out).
func (o *observedAddrs) forget(conn string) {
	o.mu.Lock()
	delete(o.conns, conn)
	o.mu.Unlock()
}

// best is the addresses to punch from: those most observer networks
// agree on (only those seen by two or more, when there are any), most
// votes first, then the most recent, at most maxPunchAddrs.
func (o *observedAddrs) best(now time.Time) []ma.Multiaddr {
	type tally struct {
		addr   ma.Multiaddr
		votes  int
		latest time.Time
	}
	o.mu.Lock()
	byAddr := map[string]*tally{}
	for _, v := range o.votes {
		if now.Sub(v.at) > observedFor {
			continue
		}
		t := byAddr[string(v.addr.Bytes())]
		if t == nil {
			t = &tally{addr: v.addr}
			byAddr[string(v.addr.Bytes())] = t
		}
		t.votes++
		if v.at.After(t.latest) {
			t.latest = v.at
		}
	}
	o.mu.Unlock()
	var ts []*tally
	agreed := false
	for _, t := range byAddr {
		ts = append(ts, t)
		agreed = agreed || t.votes >= 2
	}
	if agreed {
		ts = slices.DeleteFunc(ts, func(t *tally) bool { return t.votes < 2 })
	}
	slices.SortFunc(ts, func(a, b *tally) int {
		if a.votes != b.votes {
			return b.votes - a.votes
		}
		return b.latest.Compare(a.latest)
	})
	var out []ma.Multiaddr
	for _, t := range ts[:min(len(ts), maxPunchAddrs)] {
		out = append(out, t.addr)
	}
	return out
}
