// Package ledger is give and take between peers: signed receipts and each
// peer's own ledger of them.
//
// When a peer serves another (a role's answer, a pipeline stage's
// positions, a draft, a shard), the peer served counts the work as taken
// (Ledger.Take) and, after a delay that gathers more work for the same
// server, signs one receipt of it all (Ledger.Issue): server, client,
// time, nonce, and items of kind, model, role or layers, tokens or bytes.
// The server keeps the count: Ledger.Accept checks the signature against
// the key in the client's peer ID, the time window and the nonce (never
// counted twice), and counts the work as given. A ledger holds only this
// peer's own accounts, decaying with a half-life, and is saved in the
// data dir; there is no global state and no chain.
//
// What a liar can and cannot gain:
//   - A server cannot forge or inflate a receipt: the client's signature
//     covers every field. It can refuse to serve; it cannot be paid for
//     work the client did not sign for.
//   - A client can under-report or sign nothing: it then ranks as a
//     taker at that server, which is what it is.
//   - A replayed receipt is refused by its nonce within the window, and
//     for being old past it; a receipt for another server is refused.
//   - A sybil signing receipts for its friend makes the friend's ledger
//     say the friend gave the sybil work: that lowers the sybil at the
//     friend, and changes nothing at any other peer, whose ledger counts
//     only receipts that peer signed or was sent for its own work.
//   - A peer's standing is earned by serving the very peer that ranks it,
//     or, within the allowance, peers it proved and dealt with (vouchers,
//     vouch.go): sybils vouching for each other count for nothing where
//     none is proven. A free rider keeps its allowance at each peer it has
//     not served, and is served whenever there is room.
package ledger
