package nat

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

// Relay limits per circuit (each direction for bytes).
const (
	memberRelayDuration = time.Hour
	memberRelayBytes    = 1 << 30
)

// relayLimit is the per-circuit limit of this peer's relay service:
// "control" keeps libp2p's defaults (2 minutes, 128 KiB each way: pings,
// records, a short MoA answer); "member" lets pipeline and MoA traffic
// flow (1 hour, 1 GiB each way). The default is "member" in a private
// swarm, whose every peer holds the swarm key, and "control" otherwise.
func relayLimit(mode string, private bool) *relay.RelayLimit {
	if relayLimitName(mode, private) == "member" {
		return &relay.RelayLimit{Duration: memberRelayDuration, Data: memberRelayBytes}
	}
	return relay.DefaultLimit()
}

// relayLimitName is the limit nat.relay_limit mode chooses.
func relayLimitName(mode string, private bool) string {
	if mode == "member" || (mode == "" && private) {
		return "member"
	}
	return "control"
}

// relayACL lets only swarm members use this peer's relay: peers whose
// identify lists the swarm's protocols (in a private swarm, holding the
// key is enough), and that it has not banned. In a public swarm that is a
// claim anyone who implements the protocols can make, which is why member
// limits are for private swarms. (Waiting for the requester's signed
// record as well cost a joining peer a quarter second and its first
// liveness probe, and a record is self-signed too.)
type relayACL struct {
	log     *slog.Logger
	h       atomic.Pointer[host.Host]
	banned  atomic.Pointer[func(peer.ID) bool]
	proven  atomic.Pointer[func(peer.ID) bool] // nil: nobody is proven
	budget  unprovenBudget                     // what peers that have not proven work may use
	private bool
	wait    time.Duration // 0: memberWait
}

func (a *relayACL) isProven(p peer.ID) bool {
	f := a.proven.Load()
	return f != nil && (*f)(p)
}

// memberWait bounds how long a request waits for its sender's identify
// exchange, which tells its protocols.
const memberWait = 5 * time.Second

func (a *relayACL) member(p peer.ID) bool {
	if b := a.banned.Load(); b != nil && (*b)(p) {
		return false
	}
	if a.private {
		return true
	}
	hp := a.h.Load()
	if hp == nil {
		return false
	}
	h := *hp
	speaks := func() bool {
		got, err := h.Peerstore().SupportsProtocols(p, shards.TransferProtocol)
		return err == nil && len(got) > 0
	}
	if speaks() {
		return true
	}
	// A request can arrive before identify with its sender has finished.
	wait := a.wait
	if wait == 0 {
		wait = memberWait
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	if idh, ok := h.(interface{ IDService() identify.IDService }); ok {
		for _, c := range h.Network().ConnsToPeer(p) {
			select {
			case <-idh.IDService().IdentifyWait(c):
			case <-deadline.C:
				return false
			}
		}
	}
	return speaks()
}

func (a *relayACL) AllowReserve(p peer.ID, _ ma.Multiaddr) bool {
	if !a.member(p) {
		a.log.Debug("nat: relay slot refused: not a swarm member, or banned", "peer", p)
		return false
	}
	if a.private || a.isProven(p) {
		return true // in a private swarm, holding the key is proof enough
	}
	var h host.Host
	if hp := a.h.Load(); hp != nil {
		h = *hp
	}
	var proven func(peer.ID) bool
	if f := a.proven.Load(); f != nil {
		proven = *f
	}
	if !a.budget.reserve(h, p, proven) {
		a.log.Info("nat: relay slot refused: the slots for peers that have not proven work are taken (nat.relay_unproven)",
			"peer", p, "limit", a.budget.max())
		return false
	}
	return true
}

func (a *relayACL) AllowConnect(src peer.ID, _ ma.Multiaddr, dst peer.ID) bool {
	for _, p := range []peer.ID{src, dst} {
		if !a.member(p) {
			a.log.Debug("nat: relayed connection refused: not a swarm member, or banned", "peer", p, "from", src, "to", dst)
			return false
		}
	}
	if !a.private && !a.isProven(src) && !a.budget.connect() {
		a.log.Info("nat: relayed connection refused: the circuits for peers that have not proven work are taken (nat.relay_unproven)",
			"peer", src, "to", dst, "limit", a.budget.max())
		return false
	}
	return true
}

// relaySource offers AutoRelay relay candidates: the configured relays
// first, then alive swarm peers that offer the relay protocol (identify
// says so, for peers this one has been connected to): proven peers
// first, at most one per /24, never banned ones. AutoRelay checks each
// by reserving a slot.
type relaySource struct {
	static []peer.AddrInfo
	view   atomic.Pointer[swarm.View]
	h      atomic.Pointer[host.Host]
	ledger *swarm.Trust // nil: no bans, none proven
}

func (s *relaySource) candidates(ctx context.Context, num int) <-chan peer.AddrInfo {
	out := s.static
	v, hp := s.view.Load(), s.h.Load()
	if v != nil && hp != nil {
		h := *hp
		var proven, others []peer.AddrInfo
		nets := map[netip.Prefix]bool{}
		peers := v.Peers()
		rand.Shuffle(len(peers), func(i, j int) { peers[i], peers[j] = peers[j], peers[i] })
		for _, p := range peers {
			if p.Self || !p.Alive || p.ID == h.ID() || !OffersRelay(h, p.ID) {
				continue
			}
			if s.ledger != nil {
				if banned, _ := s.ledger.Banned(p.ID); banned {
					continue
				}
			}
			if p.Addr.IsValid() {
				n, _ := p.Addr.Prefix(24)
				if p.Addr.Is6() {
					n, _ = p.Addr.Prefix(48)
				}
				if nets[n] {
					continue
				}
				nets[n] = true
			}
			ai := peer.AddrInfo{ID: p.ID}
			for _, a := range p.Cap.Addrs {
				m, err := ma.NewMultiaddr(a)
				if err != nil {
					continue
				}
				if _, err := m.ValueForProtocol(ma.P_CIRCUIT); err == nil {
					continue // a relay reached through a relay is no relay
				}
				ai.Addrs = append(ai.Addrs, m)
			}
			if len(ai.Addrs) == 0 || slices.ContainsFunc(out, func(x peer.AddrInfo) bool { return x.ID == ai.ID }) {
				continue
			}
			if s.ledger != nil && s.ledger.Proven(p.ID) {
				proven = append(proven, ai)
			} else {
				others = append(others, ai)
			}
		}
		out = append(append(slices.Clip(out), proven...), others...)
	}
	if len(out) > num {
		out = out[:num]
	}
	c := make(chan peer.AddrInfo, len(out))
	for _, ai := range out {
		c <- ai
	}
	close(c)
	return c
}

// OffersRelay reports whether id's identify lists the relay protocol.
func OffersRelay(h host.Host, id peer.ID) bool {
	got, err := h.Peerstore().SupportsProtocols(id, proto.ProtoIDv2Hop)
	return err == nil && len(got) > 0
}
