package node

import (
	"fmt"
	"math"
	"net"
	"time"
)

// GossipConfig tunes how gossip scores and gates peers. Every zero field
// takes its default.
type GossipConfig struct {
	// IPColocationThreshold is how many peers one IP address (for IPv6,
	// also one /64) may hold before they are penalised. Default 8.
	IPColocationThreshold int `json:"ip_colocation_threshold,omitempty"`
	// IPColocationWeight is the penalty's weight: each peer on a crowded
	// IP scores weight × (peers − threshold)². Default -8 (12 peers on one
	// IP get no gossip, 20 are graylisted). Must not be positive.
	IPColocationWeight float64 `json:"ip_colocation_weight,omitempty"`
	// IPColocationWhitelist are networks (CIDR) exempt from the
	// colocation penalty, e.g. a lab LAN whose peers reach others through
	// one NAT. Loopback is counted like any address unless listed here
	// (tests with many peers on one machine list 127.0.0.0/8).
	IPColocationWhitelist []string `json:"ip_colocation_whitelist,omitempty"`
	// StreamGrace is how long a peer may send gossip while refusing this
	// peer's own gossip stream before it is disconnected and refused for
	// a quarantine (which doubles with each repeat). Default 10s.
	StreamGrace Duration `json:"stream_grace,omitempty"`
}

// PeerTableConfig bounds the peer table and sets whom a full table keeps.
type PeerTableConfig struct {
	// MaxPeers bounds the table. Default 4096.
	MaxPeers int `json:"max_peers,omitempty"`
	// UnprovenShare is the share of max_peers that peers without work this
	// peer verified may hold (0 < share <= 1). Default 0.5.
	UnprovenShare float64 `json:"unproven_share,omitempty"`
	// MaxUnprovenPerSubnet bounds the rows of unproven peers answering
	// from one /24 (IPv4) or /64 (IPv6). Default 64; -1: no bound.
	MaxUnprovenPerSubnet int `json:"max_unproven_per_subnet,omitempty"`
	// Neighbours bounds the live rows of peers this peer does not need
	// (needed: proven, bootstrap and BMC peers, peers in use, holders of
	// the models it serves or asked for lately). Default 64; -1: no bound
	// (the default of a BMC bridge, whose board lists the whole room).
	Neighbours int `json:"neighbours,omitempty"`
}

func (g GossipConfig) validate() error {
	if g.IPColocationThreshold < 0 || g.IPColocationThreshold > 1<<16 {
		return fmt.Errorf("config: gossip.ip_colocation_threshold %d: want 0 (default) .. 65536", g.IPColocationThreshold)
	}
	if !(g.IPColocationWeight <= 0) || math.IsInf(g.IPColocationWeight, 0) {
		return fmt.Errorf("config: gossip.ip_colocation_weight %v: want a weight <= 0 (0: the default)", g.IPColocationWeight)
	}
	if _, err := g.whitelist(); err != nil {
		return err
	}
	if g.StreamGrace < 0 || (g.StreamGrace != 0 && g.StreamGrace < Duration(100*time.Millisecond)) || g.StreamGrace > Duration(10*time.Minute) {
		return fmt.Errorf("config: gossip.stream_grace %s: want 100ms..10m", time.Duration(g.StreamGrace))
	}
	return nil
}

func (g GossipConfig) whitelist() ([]*net.IPNet, error) {
	var out []*net.IPNet
	if len(g.IPColocationWhitelist) > 256 {
		return nil, fmt.Errorf("config: gossip.ip_colocation_whitelist: %d networks, at most 256", len(g.IPColocationWhitelist))
	}
	for _, s := range g.IPColocationWhitelist {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			return nil, fmt.Errorf("config: gossip.ip_colocation_whitelist: %q is not a CIDR network (e.g. 192.168.1.0/24)", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func (p PeerTableConfig) validate() error {
	if p.MaxPeers < 0 || p.MaxPeers > 1<<20 {
		return fmt.Errorf("config: peer_table.max_peers %d: want 0 (default) .. 1048576", p.MaxPeers)
	}
	if !(p.UnprovenShare >= 0 && p.UnprovenShare <= 1) {
		return fmt.Errorf("config: peer_table.unproven_share %v: want 0 (default) < share <= 1", p.UnprovenShare)
	}
	if p.Neighbours < -1 || p.Neighbours > 1<<20 {
		return fmt.Errorf("config: peer_table.neighbours %d: want -1 (no bound), 0 (default: 64) .. 1048576", p.Neighbours)
	}
	if p.MaxUnprovenPerSubnet < -1 {
		return fmt.Errorf("config: peer_table.max_unproven_per_subnet %d: want -1 (no bound), 0 (default) or more", p.MaxUnprovenPerSubnet)
	}
	return nil
}
