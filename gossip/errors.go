package gossip

import "errors"

var (
	// ErrTooLarge: a payload exceeds its topic's size limit.
	ErrTooLarge = errors.New("gossip: payload too large")
	// ErrMalformed: a payload does not decode or breaks a field limit.
	ErrMalformed = errors.New("gossip: malformed record")
	// ErrBadSignature: the envelope does not verify, or it was signed by
	// another key than the record's author.
	ErrBadSignature = errors.New("gossip: bad signature")
	// ErrStale: the record's sequence number is not above the last one seen
	// from that peer (a replay, or a reordering).
	ErrStale = errors.New("gossip: stale or replayed record")
)
