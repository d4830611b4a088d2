// Package mobile is the facade a phone app embeds the peer through, with
// gomobile (gomobile bind makes an Android .aar and an iOS .xcframework of
// it; docs/mobile.md). It is a thin layer over node.Node, the
// same peer swarmd runs: Start reads the same JSON config, Status, Peers
// and ID answer what GET /v1/swarm/{status,peers,id} answer, and Ask runs
// what POST /v1/swarm/query runs. It holds no second implementation of
// anything.
//
// Its exported API uses only what gobind can bind: strings (JSON in and
// out), bool, int, error, pointers to this package's structs, and this
// package's interfaces for callbacks (AskHandler, Logger), which the app
// implements in Kotlin, Java or Swift.
//
// Callbacks never run on the node's own goroutines: each request, and the
// log, has one goroutine that calls the app in order, one call at a time,
// so a slow callback delays only its own stream and never stalls the swarm
// protocols. A request's events wait in memory for a slow handler (at
// most max_tokens tokens per agent); log lines beyond a small buffer are
// dropped and counted.
//
// It must not import anything but node, client and the tier-0
// helpers (internal/version): swarmd and the app share one peer.
package mobile
