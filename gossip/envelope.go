package gossip

import (
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// SealCapability signs c with key (which must be c.PeerID's key) into the
// bytes of a libp2p signed envelope.
func SealCapability(c *Capability, key crypto.PrivKey) ([]byte, error) {
	return seal(c, key, "capability")
}

// OpenCapability verifies a sealed capability and returns it with the peer
// that signed it. It checks size, signature, field limits and that the
// signer is the peer the record describes. It does not check freshness.
func OpenCapability(b []byte) (*Capability, peer.ID, error) {
	return open[*Capability](b, CapabilityDomain, "capability")
}

// seqTracker remembers the highest sequence number accepted from each peer,
// so replayed or reordered records are dropped. It holds at most max peers;
// when full it forgets the lowest-seq entries first, which are the oldest
// for peers whose seq follows their clock.
type seqTracker struct {
	mu   sync.Mutex
	last map[peer.ID]uint64
	max  int
}

func newSeqTracker(max int) *seqTracker {
	return &seqTracker{last: make(map[peer.ID]uint64), max: max}
}

// accept records seq for p if it is above the last one and reports whether it was.
func (t *seqTracker) accept(p peer.ID, seq uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if last, ok := t.last[p]; ok && seq <= last {
		return false
	}
	if _, ok := t.last[p]; !ok && len(t.last) >= t.max {
		var victim peer.ID
		var min uint64 = ^uint64(0)
		for q, s := range t.last {
			if s < min {
				victim, min = q, s
			}
		}
		delete(t.last, victim)
	}
	t.last[p] = seq
	return true
}
