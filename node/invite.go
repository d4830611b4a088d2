package node

import (
	"bytes"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	ma "github.com/multiformats/go-multiaddr"
)

// InvitePrefix starts every join token; the digit is the token's version.
const InvitePrefix = "swarm1-"

// maxInviteAddrs bounds the addresses a token carries, to keep it short
// enough to paste and to show as a QR code.
const maxInviteAddrs = 6

// ErrBadToken is wrapped by every error ParseInvite returns.
var ErrBadToken = errors.New("node: bad join token")

// Invite is what a join token carries: the swarm key and where to find the
// inviting peer. It is a secret: whoever holds it can join the swarm.
type Invite struct {
	Key   pnet.PSK
	Peer  peer.ID
	Addrs []ma.Multiaddr
}

// b32 is lower-case base32 without padding: a token is one word that
// survives a double-click, and ParseInvite takes either case.
var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// String encodes the invite as a join token: InvitePrefix, then base32 of
// the body's length, the body (key, peer ID, addresses) and 4 bytes of its
// SHA-256, so a truncated or mistyped token is told apart from a good one.
func (inv Invite) String() string {
	var body []byte
	body = append(body, inv.Key...)
	id := []byte(inv.Peer)
	body = binary.AppendUvarint(body, uint64(len(id)))
	body = append(body, id...)
	addrs := inv.Addrs
	if len(addrs) > maxInviteAddrs {
		addrs = addrs[:maxInviteAddrs]
	}
	body = binary.AppendUvarint(body, uint64(len(addrs)))
	for _, a := range addrs {
		b := a.Bytes()
		body = binary.AppendUvarint(body, uint64(len(b)))
		body = append(body, b...)
	}
	out := binary.AppendUvarint(nil, uint64(len(body)))
	out = append(out, body...)
	sum := sha256.Sum256(body)
	out = append(out, sum[:4]...)
	return InvitePrefix + strings.ToLower(b32.EncodeToString(out))
}

// AddrInfos are the bootstrap addresses of the invite: each address with
// the inviting peer's ID.
func (inv Invite) Bootstrap() []string {
	out := make([]string, 0, len(inv.Addrs))
	for _, a := range inv.Addrs {
		out = append(out, a.String()+"/p2p/"+inv.Peer.String())
	}
	return out
}

func badToken(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadToken}, args...)...)
}

// ParseInvite decodes a join token. White space inside it (a token pasted
// over two lines) is ignored; every error names what is wrong.
func ParseInvite(s string) (Invite, error) {
	s = strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, s)
	if s == "" {
		return Invite{}, badToken("the token is empty")
	}
	if !strings.HasPrefix(strings.ToLower(s), InvitePrefix) {
		if strings.HasPrefix(strings.ToLower(s), "swarm") && strings.Contains(s, "-") {
			return Invite{}, badToken("%q is not a version this peer reads (want %s...): upgrade this peer", s[:strings.Index(s, "-")+1], InvitePrefix)
		}
		return Invite{}, badToken("it does not start with %s (copy the whole output of swarmctl invite)", InvitePrefix)
	}
	enc := strings.ToUpper(s[len(InvitePrefix):])
	raw, err := b32.DecodeString(enc)
	if err != nil {
		var ce base32.CorruptInputError
		if errors.As(err, &ce) {
			at := int(ce)
			if at >= len(enc) {
				return Invite{}, badToken("it ends part-way through a character: it was cut short")
			}
			return Invite{}, badToken("character %d (%q) is not base32 (a-z, 2-7): it was mistyped", len(InvitePrefix)+at+1, enc[at])
		}
		return Invite{}, badToken("%v", err)
	}
	n, k := binary.Uvarint(raw)
	if k <= 0 {
		return Invite{}, badToken("it is cut short (%d bytes)", len(raw))
	}
	if n > 4096 {
		return Invite{}, badToken("it claims a %d-byte body: it is not a join token", n)
	}
	if got := uint64(len(raw) - k); got < n+4 {
		return Invite{}, badToken("it is cut short: %d of its %d bytes are there (copy the whole token)", got, n+4)
	} else if got > n+4 {
		return Invite{}, badToken("it has %d bytes more than it says: two tokens pasted together?", got-n-4)
	}
	body, sum := raw[k:k+int(n)], raw[k+int(n):]
	if want := sha256.Sum256(body); !bytes.Equal(sum, want[:4]) {
		return Invite{}, badToken("its checksum does not match: a character was mistyped")
	}
	return decodeInviteBody(body)
}

func decodeInviteBody(b []byte) (Invite, error) {
	var inv Invite
	if len(b) < 32 {
		return inv, badToken("its swarm key is %d bytes, want 32", len(b))
	}
	inv.Key = append(pnet.PSK(nil), b[:32]...)
	b = b[32:]
	next := func(what string) ([]byte, error) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, badToken("its %s is cut short", what)
		}
		v := b[k : k+int(n)]
		b = b[k+int(n):]
		return v, nil
	}
	id, err := next("peer ID")
	if err != nil {
		return inv, err
	}
	if inv.Peer, err = peer.IDFromBytes(id); err != nil {
		return inv, badToken("its peer ID: %v", err)
	}
	count, k := binary.Uvarint(b)
	if k <= 0 || count > maxInviteAddrs {
		return inv, badToken("its address count is bad")
	}
	b = b[k:]
	for i := uint64(0); i < count; i++ {
		ab, err := next("address")
		if err != nil {
			return inv, err
		}
		a, err := ma.NewMultiaddrBytes(ab)
		if err != nil {
			return inv, badToken("address %d: %v", i+1, err)
		}
		inv.Addrs = append(inv.Addrs, a)
	}
	if len(b) != 0 {
		return inv, badToken("%d bytes follow its last address", len(b))
	}
	if len(inv.Addrs) == 0 {
		return inv, badToken("it names no address of the inviting peer")
	}
	return inv, nil
}
