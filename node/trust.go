package node

import (
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/swarm"
)

// The wiring of this peer's trust ledger into gossip and the peer table:
// the ledger's bans graylist and disconnect a peer (gossip.Gate is also
// the host's connection gater), its proven peers keep their rows in a
// full table, and the gate cuts off peers that refuse our gossip stream.

// Trust is this peer's ledger of what it verified itself (nil before Start).
func (n *Node) Trust() *swarm.Trust {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.trust
}

// newGate builds the ledger and the gate, before the host: the gate is
// the host's connection gater.
func (n *Node) newGate() {
	if n.trust == nil {
		n.trust = swarm.NewTrust()
	}
	n.gate = gossip.NewGate(n.trust, time.Duration(n.cfg.Gossip.StreamGrace))
}

// gossipOptions are the router's options from the config.
func (n *Node) gossipOptions() ([]gossip.Option, error) {
	g := n.cfg.Gossip
	wl, err := g.whitelist()
	if err != nil {
		return nil, err
	}
	return []gossip.Option{
		gossip.WithHeartbeat(time.Duration(n.cfg.Heartbeat)),
		gossip.WithColocation(gossip.Colocation{Threshold: g.IPColocationThreshold, Weight: g.IPColocationWeight, Whitelist: wl}),
		gossip.WithGate(n.gate),
	}, nil
}

// wireBans makes a ban cut the peer off at once (the gate and the score
// keep it off while the ban lasts).
func (n *Node) wireBans() {
	router := n.router
	n.trust.OnBan(func(p peer.ID) {
		router.Ban(p)
		n.log.Info("peer banned: disconnected and no longer heard", "peer", p)
	})
}

// swarmOptions are the peer table's options from the config.
func (n *Node) swarmOptions() []swarm.Option {
	pt := n.cfg.PeerTable
	boot := map[peer.ID]bool{}
	for _, b := range n.cfg.Bootstrap {
		if ai, err := ParseBootstrap(b); err == nil {
			boot[ai.ID] = true
		}
	}
	keep := map[peer.ID]bool{}
	for _, s := range n.cfg.BMCPeers {
		if id, err := peer.Decode(s); err == nil {
			keep[id] = true
		}
	}
	h := n.host
	bridge := n.cfg.BMCSerial != ""
	neighbours := pt.Neighbours
	if bridge && neighbours == 0 {
		neighbours = -1 // its board keeps liveness of the whole room
	}
	opts := []swarm.Option{
		swarm.WithTrust(n.trust),
		swarm.WithDead(n.excluded), // the BMC's dead are not Routable
		swarm.WithAdmission(swarm.Admission{UnprovenShare: pt.UnprovenShare, PerSubnet: pt.MaxUnprovenPerSubnet, Neighbours: neighbours}),
		// Bootstrap peers are kept while this peer is isolated, and let go
		// past that (swarm/bootstrap.go); BMC peers always.
		swarm.WithBootstrap(func(id peer.ID) bool { return boot[id] }),
		swarm.WithProtect(func(id peer.ID) bool { return keep[id] || swarm.InferenceStreamOpen(h, id) }),
		// The peers with an inference stream open are in use: probed every
		// heartbeat, for two minutes after their last stream. A BMC bridge
		// uses every peer: each answer is the heartbeat it forwards to its
		// board, whose clock declares dead a peer that stops answering.
		swarm.WithInUse(func(id peer.ID) bool { return bridge || swarm.InferenceStreamOpen(h, id) }),
	}
	if n.pipe != nil {
		opts = append(opts, swarm.WithStored(storedModels(n.pipe.store)))
	}
	return opts
}
