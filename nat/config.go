package nat

import (
	"fmt"
	"net"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Config is how a peer deals with NAT: finding out whether it is
// reachable, mapping a port on the router, relaying for others, using
// relays and punching holes. It is the "nat" section of the node's
// config file; its zero value is valid (every key at its default).
type Config struct {
	// Reachability: "auto" (default: AutoNAT v2 asks other peers to dial
	// back), "public" or "private" (forced: a peer known to be behind NAT,
	// or a server known to be reachable).
	Reachability string `json:"reachability,omitempty"`
	// RelayService: "auto" (default: serve circuit relay v2 to swarm
	// members while this peer is publicly reachable), "on" (always: a server
	// known to be reachable, or a LAN peer relaying for others on the LAN)
	// or "off".
	RelayService string `json:"relay_service,omitempty"`
	// RelayLimit: what one circuit through this peer's relay may carry:
	// "control" (libp2p's defaults: 2 minutes and 128 KiB each way; pings,
	// records, short answers) or "member" (1 hour and 1 GiB each way, so
	// pipeline and MoA traffic can flow where no direct path exists).
	// Default: "member" in a private swarm, "control" otherwise.
	RelayLimit string `json:"relay_limit,omitempty"`
	// RelayUnproven bounds what peers that have not proven work to this
	// peer (passed none of its challenges) may use of its relay in a
	// public swarm (a private swarm's peers all hold the key): how many
	// slots they may hold at once, and how many circuits may be open
	// through it before such a peer opens no more. Proven peers are never
	// refused by it. 0: DefaultRelayUnproven (32); -1: none.
	RelayUnproven int `json:"relay_unproven,omitempty"`
	// Relays are relays to reserve a slot on while this peer is not
	// publicly reachable: multiaddrs ending in /p2p/ID.
	Relays []string `json:"relays,omitempty"`
	// HolePunching: "on" (default: DCUtR turns a relayed connection into a
	// direct one where both NATs allow) or "off".
	HolePunching string `json:"hole_punching,omitempty"`
	// PortMapping: "on" (default: ask the router for a port by UPnP or
	// NAT-PMP) or "off".
	PortMapping string `json:"port_mapping,omitempty"`
	// PublicCIDRs are address ranges this peer treats as public although
	// they are private or reserved (a lab whose "internet" uses such
	// addresses). It changes a process-wide table: one peer per process.
	PublicCIDRs []string `json:"public_cidrs,omitempty"`
}

func oneOf(key, v string, allowed ...string) error {
	if v == "" {
		return nil
	}
	for _, a := range allowed {
		if v == a {
			return nil
		}
	}
	return fmt.Errorf("config: nat.%s %q: want one of %v", key, v, allowed)
}

// Validate reports the first key whose value is not allowed, naming it
// as the config file does (nat.KEY).
func (c Config) Validate() error {
	if err := oneOf("reachability", c.Reachability, "auto", "public", "private"); err != nil {
		return err
	}
	if err := oneOf("relay_service", c.RelayService, "auto", "on", "off"); err != nil {
		return err
	}
	if err := oneOf("relay_limit", c.RelayLimit, "control", "member"); err != nil {
		return err
	}
	if err := oneOf("hole_punching", c.HolePunching, "on", "off"); err != nil {
		return err
	}
	if err := oneOf("port_mapping", c.PortMapping, "on", "off"); err != nil {
		return err
	}
	if c.RelayUnproven < -1 || c.RelayUnproven > 1024 {
		return fmt.Errorf("config: nat.relay_unproven %d: want -1 (none), 0 (default %d) or up to 1024", c.RelayUnproven, DefaultRelayUnproven)
	}
	if _, err := c.relays(); err != nil {
		return err
	}
	if len(c.PublicCIDRs) > 64 {
		return fmt.Errorf("config: nat.public_cidrs: %d ranges, at most 64", len(c.PublicCIDRs))
	}
	for _, s := range c.PublicCIDRs {
		if _, _, err := net.ParseCIDR(s); err != nil {
			return fmt.Errorf("config: nat.public_cidrs: %q: %w", s, err)
		}
	}
	return nil
}

// relays parses Relays.
func (c Config) relays() ([]peer.AddrInfo, error) {
	if len(c.Relays) > 32 {
		return nil, fmt.Errorf("config: nat.relays: %d relays, at most 32", len(c.Relays))
	}
	var out []peer.AddrInfo
	for _, s := range c.Relays {
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("config: nat.relays: %q: %w", s, err)
		}
		ai, err := peer.AddrInfoFromP2pAddr(m)
		if err != nil {
			return nil, fmt.Errorf("config: nat.relays: %q: want a multiaddr ending in /p2p/PEER_ID: %w", s, err)
		}
		out = append(out, *ai)
	}
	return out, nil
}
