// Package gossip owns the swarm's publish/subscribe layer: the gossipsub
// router with strict signing and peer scoring, the topic names, the typed
// messages carried on them (signed capability records, and BMC tables) and
// the validators that drop oversize, malformed, unsigned, mis-signed and
// replayed payloads before they reach anyone.
//
// It must not keep the peer table (that is package swarm) nor open streams:
// it only moves small signed records.
package gossip
