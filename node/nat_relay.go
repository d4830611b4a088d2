package node

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
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

// relayACL lets only swarm members use this peer's relay: peers that
// speak the swarm's protocols (in a private swarm, holding the key is
// enough) and that this peer has not banned.
type relayACL struct {
	log     *slog.Logger
	h       atomic.Pointer[host.Host]
	banned  atomic.Pointer[func(peer.ID) bool]
	private bool
}

// identifyWait bounds how long a request waits for the requester's
// identify exchange, which tells its protocols.
const identifyWait = 5 * time.Second

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
	idh, ok := h.(interface{ IDService() identify.IDService })
	if !ok {
		return false
	}
	timeout := time.NewTimer(identifyWait)
	defer timeout.Stop()
	for _, c := range h.Network().ConnsToPeer(p) {
		select {
		case <-idh.IDService().IdentifyWait(c):
		case <-timeout.C:
			return speaks()
		}
	}
	return speaks()
}

func (a *relayACL) AllowReserve(p peer.ID, _ ma.Multiaddr) bool {
	if !a.member(p) {
		a.log.Info("nat: relay slot refused: not a swarm member, or banned", "peer", p)
		return false
	}
	return true
}

func (a *relayACL) AllowConnect(src peer.ID, _ ma.Multiaddr, dst peer.ID) bool {
	for _, p := range []peer.ID{src, dst} {
		if !a.member(p) {
			a.log.Info("nat: relayed connection refused: not a swarm member, or banned", "peer", p, "from", src, "to", dst)
			return false
		}
	}
	return true
}

// relaySource offers AutoRelay relay candidates: the configured relays
// first, then alive swarm peers whose records say they relay (AutoRelay
// checks each one speaks the relay protocol and grants a slot; a peer's
// word is only a hint).
type relaySource struct {
	static []peer.AddrInfo
	view   atomic.Pointer[swarm.View]
	self   peer.ID
}

func (s *relaySource) candidates(ctx context.Context, num int) <-chan peer.AddrInfo {
	out := s.static
	if v := s.view.Load(); v != nil {
		var swarmRelays []peer.AddrInfo
		for _, p := range v.Peers() {
			if p.Self || !p.Alive || !p.Cap.Relay || p.ID == s.self {
				continue
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
			if len(ai.Addrs) > 0 && !slices.ContainsFunc(out, func(x peer.AddrInfo) bool { return x.ID == ai.ID }) {
				swarmRelays = append(swarmRelays, ai)
			}
		}
		rand.Shuffle(len(swarmRelays), func(i, j int) { swarmRelays[i], swarmRelays[j] = swarmRelays[j], swarmRelays[i] })
		out = append(slices.Clip(out), swarmRelays...)
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
