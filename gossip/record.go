package gossip

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"

	"github.com/llmswarm/llmswarm/internal/wire"
)

// signedRecord is what every gossip record is: a libp2p record that checks
// its own fields and names the peer that must have signed it.
type signedRecord interface {
	record.Record
	Validate() error
	signerField() string // the peer ID the record says signed it
	sequence() uint64    // strictly increasing per signer
}

func (c *Capability) signerField() string { return c.PeerID }
func (c *Capability) sequence() uint64    { return c.Seq }
func (t *BMCTable) signerField() string   { return t.PeerID }
func (t *BMCTable) sequence() uint64      { return t.Seq }

// unmarshalStrict decodes a record payload (unknown fields and trailing data
// are errors) into a fresh value, validates it, and only then stores it.
func unmarshalStrict[T any, P interface {
	*T
	Validate() error
}](b []byte, dst P) error {
	if len(b) > MaxRecordBytes {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, len(b))
	}
	var tmp T
	if err := wire.DecodeJSON(b, &tmp); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := P(&tmp).Validate(); err != nil {
		return err
	}
	*dst = tmp
	return nil
}

// seal signs rec with key (which must be the key of the peer rec names) into
// the bytes of a signed envelope; what names the record in errors.
func seal(rec signedRecord, key crypto.PrivKey, what string) ([]byte, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	if rec.signerField() != id.String() {
		return nil, fmt.Errorf("%w: %s names %s, key is %s", ErrBadSignature, what, rec.signerField(), id)
	}
	if err := rec.Validate(); err != nil {
		return nil, err
	}
	env, err := record.Seal(rec, key)
	if err != nil {
		return nil, fmt.Errorf("gossip: sealing %s: %w", what, err)
	}
	b, err := env.Marshal()
	if err != nil {
		return nil, fmt.Errorf("gossip: %w", err)
	}
	if len(b) > MaxRecordBytes {
		return nil, fmt.Errorf("%w: sealed %s is %d bytes (max %d)", ErrTooLarge, what, len(b), MaxRecordBytes)
	}
	return b, nil
}

// open verifies a sealed record of type P in domain and returns it with its
// signer: size, signature, field limits, and that the signer is the peer the
// record names. Freshness is the caller's business.
func open[P signedRecord](b []byte, domain, what string) (P, peer.ID, error) {
	var zero P
	if len(b) > MaxRecordBytes {
		return zero, "", fmt.Errorf("%w: %d bytes (max %d)", ErrTooLarge, len(b), MaxRecordBytes)
	}
	env, rec, err := record.ConsumeEnvelope(b, domain)
	if err != nil {
		if errors.Is(err, ErrMalformed) || errors.Is(err, ErrTooLarge) {
			return zero, "", err
		}
		return zero, "", fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	r, ok := rec.(P)
	if !ok {
		return zero, "", fmt.Errorf("%w: payload is %T, not a %s", ErrMalformed, rec, what)
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil {
		return zero, "", fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	if r.signerField() != signer.String() {
		return zero, "", fmt.Errorf("%w: %s of %s signed by %s", ErrBadSignature, what, r.signerField(), signer)
	}
	return r, signer, nil
}

// checkAuthor refuses a message whose gossip author is not the record's
// signer: nobody may republish another peer's record.
func checkAuthor(m *pubsub.Message, signer peer.ID, what string) error {
	author := m.GetFrom()
	if author == "" {
		return fmt.Errorf("%w: message without author", ErrBadSignature)
	}
	if author != signer {
		return fmt.Errorf("%w: %s republished a %s of %s", ErrBadSignature, author, what, signer)
	}
	return nil
}

// validator builds a topic validator from check: it rejects (and so
// penalises the sender through peer scoring) what check refuses, ignores
// stale records and sequence numbers not above the signer's last, and hands
// the decoded record to subscribers in ValidatorData.
func validator[P signedRecord](log *slog.Logger, seqs *seqTracker, what string,
	check func(*pubsub.Message) (P, peer.ID, error)) func(context.Context, peer.ID, *pubsub.Message) pubsub.ValidationResult {
	return func(_ context.Context, from peer.ID, m *pubsub.Message) pubsub.ValidationResult {
		rec, signer, err := check(m)
		if err != nil {
			log.Debug(what+" rejected", "peer", from, "err", err)
			if errors.Is(err, ErrStale) {
				return pubsub.ValidationIgnore
			}
			return pubsub.ValidationReject
		}
		if !seqs.accept(signer, rec.sequence()) {
			return pubsub.ValidationIgnore
		}
		m.ValidatorData = rec
		return pubsub.ValidationAccept
	}
}
