// Package swarmsim runs a swarm of N real libp2p hosts, each with the
// project's real control plane (gossip.NewRouter with node's options, the
// Kademlia DHT of swarm.NewDHT, swarm.New(...).Start), on go-libp2p's
// simulated network (github.com/marcopolo/simnet, QUIC only, wired as
// go-libp2p's x/simlibp2p wires it) under testing/synctest, so that
// simulated time passes without real time: a test waits minutes of the
// swarm's life in seconds of CPU.
//
// Data flows one way: the harness builds hosts and control planes, moves
// packets between them with each peer's link (latency, bandwidth, loss),
// drops packets across a partition or from a crashed peer, and counts every
// UDP datagram a peer sends (the QUIC packets with their headers and
// encryption: libp2p's whole traffic, control plane and transport, without
// IP and UDP headers), and the stream bytes each protocol sent. What peers
// know it reads only through the control plane's public API (swarm.Service,
// its View, FindProviders), and a peer uses a route as node's pipeline
// requests do (Peer.Use: stage streams open, seen by the control plane
// through WithInUse and swarm.InferenceStreamOpen, as node wires it), so
// the harness measures whatever design is behind that API.
//
// It is a test harness (no import tier): only tests import it, and every
// call that blocks must be made inside a synctest bubble (synctest.Test).
// It must not start node.Node: its HTTP API and files do real I/O, which
// would stop synctest's clock.
package swarmsim
