package nat

import (
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	circuit "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	ma "github.com/multiformats/go-multiaddr"
)

// ConnKind is how this peer reaches id: "local" (itself), "punched",
// "direct" or "relayed" (the best of its open connections), or "" when
// none is open (or before Start). It takes no lock of the caller's:
// generations call it while the node closes.
func (s *Service) ConnKind(id peer.ID) string {
	h := s.host()
	if h == nil {
		return ""
	}
	if id == h.ID() {
		return "local"
	}
	best := ""
	for _, c := range h.Network().ConnsToPeer(id) {
		switch k := s.Kind(c); {
		case k != "relayed":
			return k // direct or punched: what a new stream takes
		case best == "":
			best = k
		}
	}
	return best
}

// Kind is how c reaches its peer: "relayed" (through a circuit relay),
// "punched" (direct, made by a hole punch) or "direct".
func (s *Service) Kind(c network.Conn) string {
	return s.punch.Load().kind(c)
}

// Relayed connections whose relay allows at least this much carry
// pipeline traffic; smaller ones (libp2p's default: 128 KiB, 2 minutes)
// carry control traffic only.
const (
	bulkRelayBytes    = 16 << 20
	bulkRelayDuration = 5 * time.Minute
)

// ControlOnly reports whether every open connection to id goes through
// a relay whose limits fit control traffic only: a pipeline hop there
// would be cut by the relay mid-generation. False before Start.
func (s *Service) ControlOnly(id peer.ID) bool {
	h := s.host()
	if h == nil || !RelayedOnly(h, id) {
		return false
	}
	for _, c := range h.Network().ConnsToPeer(id) {
		st := c.Stat()
		if !st.Limited {
			return false
		}
		data, _ := st.Extra[circuit.StatLimitData].(uint64)
		dur, _ := st.Extra[circuit.StatLimitDuration].(time.Duration)
		if (data == 0 || data >= bulkRelayBytes) && (dur == 0 || dur >= bulkRelayDuration) {
			return false
		}
	}
	return true
}

// isRelayed reports whether c goes through a circuit relay.
func isRelayed(c network.Conn) bool {
	_, err := c.RemoteMultiaddr().ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

// RelayedOnly reports whether every open connection to id goes through a
// relay (and there is at least one).
func RelayedOnly(h host.Host, id peer.ID) bool {
	conns := h.Network().ConnsToPeer(id)
	for _, c := range conns {
		if !isRelayed(c) {
			return false
		}
	}
	return len(conns) > 0
}
