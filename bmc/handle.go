package bmc

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
)

// HandleLen is the size of a Handle in bytes (12 hex characters on the wire).
const HandleLen = 6

// Handle names a node or a model on the board. The board has 2 KB of RAM and
// cannot store 52-character peer IDs or full CIDs, so the host maps each to
// the first 6 bytes of its SHA-256 (48 bits: a collision among n handles has
// probability about n²/2^49, negligible for the board's 32 slots).
type Handle [HandleLen]byte

// HandleFor returns the handle of an identifier. By convention a node's handle
// is HandleFor([]byte(peerID)) over the peer ID's binary multihash (the
// string value of a libp2p peer.ID, not its base58 text), and a model's is
// HandleFor(cid.Bytes()) over the binary CID of its GGUF file.
func HandleFor(id []byte) Handle {
	sum := sha256.Sum256(id)
	var h Handle
	copy(h[:], sum[:HandleLen])
	return h
}

// String returns the 12 lowercase hex characters used on the wire.
func (h Handle) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is the zero handle.
func (h Handle) IsZero() bool { return h == Handle{} }

// MarshalText implements encoding.TextMarshaler.
func (h Handle) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (h *Handle) UnmarshalText(b []byte) error {
	v, err := ParseHandle(string(b))
	if err != nil {
		return err
	}
	*h = v
	return nil
}

// ParseHandle parses exactly 12 lowercase hex characters, the only spelling
// the board accepts.
func ParseHandle(s string) (Handle, error) {
	var h Handle
	if len(s) != 2*HandleLen {
		return h, fmt.Errorf("%w: handle %q: want %d hex characters", ErrMalformed, s, 2*HandleLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return h, fmt.Errorf("%w: handle %q: not lowercase hex", ErrMalformed, s)
		}
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return h, fmt.Errorf("%w: handle %q: %w", ErrMalformed, s, err)
	}
	return h, nil
}
