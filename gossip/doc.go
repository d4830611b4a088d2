// Package gossip owns the swarm's publish/subscribe layer: the gossipsub
// router with strict signing and peer scoring, the topic names, the typed
// messages carried on them (signed capability records, and BMC tables) and
// the validators that drop oversize, malformed, unsigned, mis-signed and
// replayed payloads before they reach anyone.
//
// Scoring and gating (score.go, gate.go, flood.go) decide whom this peer
// hears: invalid messages, records beyond the flood limit (one per
// heartbeat per signer, a burst of ten), many peers on one IP and the
// trust ledger's verdicts lower a peer's score (a quiet peer loses
// nothing: records go out only when they change); the Gate, which is
// also the host's connection gater, cuts off banned peers and peers that
// send gossip while refusing this peer's own gossip stream (go-libp2p-pubsub
// never scores those).
//
// It must not keep the peer table (that is package swarm) nor open streams:
// it only moves small signed records. It takes the ledger's word through
// the Ledger interface and never records verdicts itself.
package gossip
