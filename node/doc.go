// Package node is one peer of the swarm: it builds the libp2p host (identity,
// transports, security, muxer, resource and connection managers, optional
// private network), starts discovery (mDNS, bootstrap peers, the private DHT),
// the gossip router and the swarm view, and serves the local HTTP API. It is
// the single wiring point of the lower packages.
//
// It must not read flags or environment variables (cmd/ does that) and must
// not hold protocol logic of its own: each protocol lives in its package.
package node
