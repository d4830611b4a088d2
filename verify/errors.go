package verify

import (
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/swarm"
)

var (
	// ErrBadFrame: a frame is malformed or breaks the protocol's limits.
	ErrBadFrame = errors.New("verify: bad frame")
	// ErrNoReference: this peer has no copy of the layers it would need to
	// check a claim (none of its own, none it could fetch): the claim
	// stays unverified, which is no fault of the peer.
	ErrNoReference = errors.New("verify: no reference to check the claim against")
	// ErrBanned: the peer is banned in this peer's ledger (it failed an
	// earlier check).
	ErrBanned = errors.New("verify: peer is banned")
	// ErrNotHeld: the peer refused the challenge because it does not hold
	// the claimed layers now (restarting, still loading them, or it
	// dropped them since its record said so). That is no lie about the
	// layers' output, so no ban: the claim counts as withdrawn (what was
	// verified of it must be proven again) and the peer is left out of
	// that claim's work until a later challenge passes.
	ErrNotHeld = errors.New("verify: the peer does not hold the claimed layers now")
)

// FailError is a failed check: the peer answered, and what it answered
// is wrong (or it refused layers it claims). The peer is banned for it.
type FailError struct {
	Peer  peer.ID
	Claim swarm.Claim
	// Layer is the layer whose output was wrong (-1: the reply as a whole).
	Layer int
	// RelErr is the relative L2 error measured at that boundary (0 when
	// the fault was not a number: a size, a NaN, a refusal).
	RelErr float64
	Fault  string
}

func (e *FailError) Error() string {
	return fmt.Sprintf("verify: peer %s failed the challenge on %s: %s", e.Peer, e.Claim, e.Fault)
}
