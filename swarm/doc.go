// Package swarm owns this peer's live view of the swarm: the peer table
// built from signed capability heartbeats and DHT lookups, liveness (a peer
// that misses its heartbeats is dead until it beats again), the lookups the
// strategies route by ("who serves role R", "who holds layers of model M"),
// bounded change subscriptions, DHT provider records that let peers
// outside the gossip mesh find each other, and the trust ledger of what
// this peer verified itself.
//
// A heartbeat makes a peer alive only with evidence that the peer answered
// this one: it came over the peer's own connection, or the peer answered a
// probe (probe.go); records relayed by others are leads, never proof, so a
// replayed record cannot resurrect a dead peer. A full table admits by the
// Admission policy (admission.go): room kept for peers with proven work,
// a cap per subnet, eviction from the most crowded subnet.
//
// It must not open inference streams or load models: it only knows who is
// out there and what they say they hold (pings are its only traffic).
package swarm
