// Package swarm owns this peer's live view of the swarm: the peer table
// built from signed capability records (published when they change and
// refreshed every few minutes: service.go), the record exchange that
// tells a newcomer the swarm at once (exchange.go), liveness from probes
// (liveness.go: the peers this one uses every heartbeat, the others on a
// budget of probes a second whatever the table's size, any peer whose last
// connection closes at once), the lookups the strategies route by ("who
// serves role R", "who holds layers of model M"), bounded change
// subscriptions, DHT provider records that let peers outside the gossip
// mesh find each other, and the trust ledger of what this peer verified
// itself. Its traffic per peer does not grow with the swarm: nothing is
// sent per heartbeat but the probes of the peers in use.
//
// A peer is alive only with evidence that it answered this one: its record
// came over its own connection, it answered the record exchange, or it
// answered a probe (liveness.go, probe.go); records relayed by others, or
// handed on in the exchange's samples, are leads, never proof, so a
// replayed record cannot resurrect a dead peer. A full table admits by the
// Admission policy (admission.go): room kept for peers with proven work,
// a cap per subnet, eviction from the most crowded subnet.
//
// It must not open inference streams or load models: it only knows who is
// out there and what they say they hold (pings and the record exchange are
// its only streams).
package swarm
