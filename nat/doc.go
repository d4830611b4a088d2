// Package nat owns how one peer deals with NAT: finding out whether it is
// reachable (AutoNAT v1 and v2, or a forced nat.reachability), mapping a
// port on the router (UPnP through libp2p, NAT-PMP of its own in
// natpmp.go), relaying for swarm members (circuit relay v2 with its ACL
// and per-circuit limits, relay.go), reserving slots on relays (the
// configured ones, then swarm peers that relay), and hole punching
// (DCUtR, with its own retries and the observed-address votes it
// punches from, punch.go and punch_observed.go). Config is the "nat"
// section of the node's config file.
//
// Data flows in three steps. New builds what the libp2p host hooks into
// (counters that are the relay's metrics tracer and the hole puncher's
// event tracer, the relay ACL, the relay finder, the address factory);
// Options hands those to the host the node builds; Start follows the
// host's reachability events and starts the parts that need the host.
// From then on the plane answers questions: Status (reachability,
// announced addresses, relay service, counters) for the status API and
// metrics, ConnKind and Kind ("direct", "punched", "relayed") for the
// strategies' traces and the peer list, ControlOnly and RelayedOnly for
// callers deciding what a relayed peer can carry. SetView lets the relay
// finder read the swarm's peer table; the trust ledger (WithTrust) keeps
// banned peers off this relay and out of the candidates.
//
// It must not build or close the libp2p host (node does both; Close stops
// only what Start started), decide routes (it says how a peer is reached;
// whether to route through it is the caller's call), open protocol
// streams of the swarm, read flags or environment variables, or map
// anything to HTTP statuses. Config.PublicCIDRs changes a process-wide
// table of go-multiaddr: one peer per process may set it.
package nat
