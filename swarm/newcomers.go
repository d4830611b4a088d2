package swarm

import (
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Newcomers in the sample. A newcomer learns the swarm from its contact's
// sample of records, and its table fills with those leads. Drawn from the
// contact's table alone, past the bound of neighbours every newcomer got
// the same 64 peers (the contact's neighbours, the swarm's first peers
// when it is the bootstrap peer for all), which no later peer's table
// could ever change: those peers were probed by every peer of the swarm
// (at 300 simulated peers joining one every 100 ms, up to 255
// connections a peer, the seed aside, while the mean was 155, growing
// with the swarm).
// So once its table is full a contact samples the newcomers that asked
// it lately first (those that sent their record and asked for a sample,
// within heldFor, the last maxNewcomers of them, at most
// newcomersPerSubnet from one network so that identities made on one
// machine cannot fill it), and its table only for the rest: a peer is a
// lead of the newcomers that come after it for a while, about as many
// as a sample holds, then of none, so that what each peer is asked by
// no longer grows with the swarm. A lead is only a lead: the newcomer
// probes it before it counts, and its own admission caps apply.
const (
	maxNewcomers       = 256
	newcomersPerSubnet = 16
)

type newcomer struct {
	id     peer.ID
	sealed []byte
	net    netip.Prefix
	at     time.Time
}

// noteNewcomer remembers id, which sent its record sealed and asked for a
// sample now, from addr.
func (e *exchange) noteNewcomer(id peer.ID, sealed []byte, addr netip.Addr, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	net := subnet(addr)
	kept := e.newcomers[:0]
	same := 0
	for _, n := range e.newcomers {
		if n.id == id || now.Sub(n.at) >= heldFor {
			continue
		}
		if n.net == net {
			same++
		}
		kept = append(kept, n)
	}
	e.newcomers = kept
	if same >= newcomersPerSubnet {
		for i, n := range e.newcomers { // the oldest of its network makes room
			if n.net == net {
				e.newcomers = append(e.newcomers[:i], e.newcomers[i+1:]...)
				break
			}
		}
	}
	if len(e.newcomers) >= maxNewcomers {
		e.newcomers = e.newcomers[1:]
	}
	e.newcomers = append(e.newcomers, newcomer{id: id, sealed: sealed, net: net, at: now})
}

// sampleFor is the sample of at most n records (maxSampleBytes in all)
// given to asker: from the table while it is not full, else the recent
// newcomers first (see above).
func (e *exchange) sampleFor(n int, asker peer.ID, now time.Time) [][]byte {
	if n <= 0 {
		return nil
	}
	if !e.s.view.Full() {
		return e.s.view.sample(n, maxSampleBytes, asker)
	}
	e.mu.Lock()
	var recent [][]byte
	for _, c := range e.newcomers {
		if c.id != asker && now.Sub(c.at) < heldFor {
			recent = append(recent, c.sealed)
		}
	}
	e.mu.Unlock()
	out, size := pickRecords(recent, n, maxSampleBytes)
	if len(out) == n {
		return out
	}
	return append(out, e.s.view.sample(n-len(out), maxSampleBytes-size, asker)...)
}
