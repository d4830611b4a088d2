package gossip

import (
	"errors"
	"fmt"
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
)

// SealCapability signs c with key (which must be c.PeerID's key) into the
// bytes of a libp2p signed envelope.
func SealCapability(c *Capability, key crypto.PrivKey) ([]byte, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	if c.PeerID != id.String() {
		return nil, fmt.Errorf("%w: record names %s, key is %s", ErrBadSignature, c.PeerID, id)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	env, err := record.Seal(c, key)
	if err != nil {
		return nil, fmt.Errorf("gossip: sealing capability: %w", err)
	}
	b, err := env.Marshal()
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: sealed capability is %d bytes (max %d)", ErrTooLarge, len(b), MaxRecordBytes)
	}
	return b, nil
}

// OpenCapability verifies a sealed capability and returns it with the peer
// that signed it. It checks size, signature, field limits and that the
// signer is the peer the record describes. It does not check freshness.
func OpenCapability(b []byte) (*Capability, peer.ID, error) {
	if len(b) > MaxRecordBytes {
		return nil, "", fmt.Errorf("%w: %d bytes (max %d)", ErrTooLarge, len(b), MaxRecordBytes)
	}
	env, rec, err := record.ConsumeEnvelope(b, CapabilityDomain)
	if err != nil {
		if errors.Is(err, ErrMalformed) || errors.Is(err, ErrTooLarge) {
			return nil, "", err
		}
		return nil, "", fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	c, ok := rec.(*Capability)
	if !ok {
		return nil, "", fmt.Errorf("%w: payload is %T, not a capability", ErrMalformed, rec)
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	if c.PeerID != signer.String() {
		return nil, "", fmt.Errorf("%w: record for %s signed by %s", ErrBadSignature, c.PeerID, signer)
	}
	return c, signer, nil
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
