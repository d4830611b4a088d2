// Package bmcauth is the swarm side of the BMC: it decides which board's
// verdicts are in force and, on the peer that has a board on its serial
// port, turns that board into a published BMC.
//
// Tables arrive on gossip's swarm/v1/bmc topic already validated and signed
// (gossip checks envelopes, sizes and per-bridge publish order). A [Service]
// keeps the last table of every allowed BMC peer, newer in (boot id, seq,
// uptime) than the one before it, counts the stale ones, remembers a bounded
// set of publishers it ignores, and applies the authority rule: among the
// allowed BMCs whose last table is fresher than [Freshness], the lowest peer
// ID is the authority. [Service.Dead] answers from the authority's table
// whether the board declared a peer dead; with no table in force it declares
// nobody dead. [Service.Snapshot] is the state a user is shown.
//
// With Config.Serial the service also runs the bridge (bridge.go): it feeds
// the board a heartbeat for every peer gossip shows beating, keeps the
// board's partition table in step with the shards peers announce, reads the
// verified table under a fresh nonce and publishes it, signed, every second.
//
// It must not decide HTTP statuses or build API types (node turns a
// Snapshot into the API's answer), read configuration files or keys (node
// hands it the key), nor route: routing asks Dead. The serial protocol and
// the board itself are package bmc's.
package bmcauth
