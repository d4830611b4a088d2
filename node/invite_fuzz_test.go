package node_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/llmswarm/llmswarm/node"
)

// FuzzParseInvite: any text either is refused with ErrBadToken or decodes
// to an invite that encodes back to a token decoding the same.
func FuzzParseInvite(f *testing.F) {
	tok := testInvite(f).String()
	for _, s := range []string{tok, tok[:50], strings.ToUpper(tok), "swarm1-", "swarm1-aaaaaaaa", "swarm2-x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		inv, err := node.ParseInvite(s)
		if err != nil {
			return
		}
		again, err := node.ParseInvite(inv.String())
		if err != nil {
			t.Fatalf("re-encoded token refused: %v", err)
		}
		if !bytes.Equal(again.Key, inv.Key) || again.Peer != inv.Peer || len(again.Addrs) != len(inv.Addrs) {
			t.Fatalf("round trip changed the invite: %+v != %+v", again, inv)
		}
	})
}
