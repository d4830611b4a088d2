// Package swarm owns this peer's live view of the swarm: the peer table
// built from signed capability heartbeats and DHT lookups, liveness (a peer
// that misses its heartbeats is dead until it beats again), the lookups the
// strategies route by ("who serves role R", "who holds layers of model M"),
// bounded change subscriptions, and DHT provider records that let peers
// outside the gossip mesh find each other.
//
// It must not open inference streams or load models: it only knows who is
// out there and what they say they hold.
package swarm
