// Package verify makes a peer's claims earned, not asserted: before a peer
// gets real work for layers [a,b) of a model (a pipeline hop) or for a role
// model (an MoA answer), this peer challenges it to compute those layers on
// an input it has never seen, and checks the answer against weights it
// verified itself.
//
// Protocol /swarm/verify/1.0.0, one challenge per stream (see wire.go and
// docs/protocols.md): the challenger sends a Request (a few fresh random token ids
// when a == 0, else fresh random hidden states scaled to RMS 1 per
// position); the peer answers with a trace, one frame per layer holding
// that layer's output for every position (after the model's last layer:
// the logits of the last position), or an error frame. Server answers for
// the models a Lookup gives it, one layer per engine call in a session
// truncated back to position 0, rate-limited per remote peer, its session
// taken from the model's own bounded queue.
//
// Checking (Checker): with a Reference holding the whole range, every
// layer's output is recomputed and compared; otherwise the range's first
// layer (tying the trace to this input) and CheckLayers-1 random others
// are recomputed from the trace's own boundaries, each from a model this
// peer holds or a one-layer slice it fetched. A relative L2 error beyond
// Tolerance, a NaN or Inf, a wrong size or a refusal of a claimed range
// as malformed fails the peer: Trust.Fail bans it, with a log line naming the peer,
// model, layers, boundary and error. A pass is Trust.Pass, and the time
// the peer took per layer (its round trip taken off) goes to
// Trust.Measure. With no reference the claim stays unverified, never
// failed. A refusal as not held (ErrNotHeld: restarting, loading, dropped)
// withdraws the claim in Trust (Trust.Withdraw), never bans.
//
// It must not route, keep the peer table or build hosts: node wires a
// Checker into the pipeline and MoA originators as their Vet hook and
// serves this peer's models through a Server. It never records another
// peer's word in the ledger: only what this peer saw.
package verify
