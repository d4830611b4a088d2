// Package bmc owns the swarm's baseboard management controller: the Arduino
// Uno firmware (bmc/firmware), its serial line protocol (PROTOCOL.md), and
// the host bridge that talks to the board over go.bug.st/serial.
//
// The board keeps, on its own clock, which nodes are alive (heartbeats in,
// dead after Misses missed beats of Period) and which node holds which layers
// of which model, and dumps both with an HMAC-SHA256 over a host nonce, a
// sequence number, an EEPROM boot counter and its uptime. [Bridge.Table]
// verifies that MAC before returning a [Table]; [VerifyTable] does the same
// for a raw dump. Nodes and models are named on the board by a 6-byte
// [Handle] computed by the host ([HandleFor]).
//
// bmc is tier 0: it must not import libp2p or any other package of this
// project, and it never publishes anything itself. Signing the verified table
// for the swarm (a libp2p signed envelope), choosing the authority among
// several BMCs and feeding heartbeats from gossip belong to bmcauth
// (tier 3).
//
// Subpackages: bmcsim builds the firmware and runs it under simavr for tests;
// firmware and harness embed the C sources so they build from any directory.
package bmc
