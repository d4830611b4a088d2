package shards

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"

	"github.com/ipfs/go-cid"
	mh "github.com/multiformats/go-multihash"
)

// FileCID returns the content ID of the file at path: CIDv1, raw codec,
// sha2-256 of its bytes. A model is named by the FileCID of its GGUF.
func FileCID(path string) (cid.Cid, error) {
	f, err := os.Open(path)
	if err != nil {
		return cid.Undef, fmt.Errorf("shards: %w", err)
	}
	defer f.Close()
	c, err := ReaderCID(f)
	if err != nil {
		return cid.Undef, fmt.Errorf("shards: hashing %s: %w", path, err)
	}
	return c, nil
}

// ReaderCID hashes everything r yields into a CIDv1 (raw, sha2-256).
func ReaderCID(r io.Reader) (cid.Cid, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return cid.Undef, err
	}
	return DigestCID(h.Sum(nil))
}

// DigestCID wraps a sha2-256 digest into a CIDv1 (raw codec).
func DigestCID(sum []byte) (cid.Cid, error) {
	if len(sum) != sha256.Size {
		return cid.Undef, fmt.Errorf("shards: sha2-256 digest has %d bytes, want %d", len(sum), sha256.Size)
	}
	m, err := mh.Encode(sum, mh.SHA2_256)
	if err != nil {
		return cid.Undef, err
	}
	return cid.NewCidV1(cid.Raw, m), nil
}

// ParseCID parses a CID string and checks it names content the way the
// swarm does (CIDv1, raw codec, sha2-256).
func ParseCID(s string) (cid.Cid, error) {
	c, err := cid.Decode(s)
	if err != nil {
		return cid.Undef, fmt.Errorf("shards: bad CID %q: %w", s, err)
	}
	p := c.Prefix()
	if p.Version != 1 || p.Codec != cid.Raw || p.MhType != mh.SHA2_256 {
		return cid.Undef, fmt.Errorf("shards: CID %q is not CIDv1 raw sha2-256", s)
	}
	return c, nil
}
