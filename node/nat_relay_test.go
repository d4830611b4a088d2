package node

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

func TestRelayLimit(t *testing.T) {
	member := &relay.RelayLimit{Duration: memberRelayDuration, Data: memberRelayBytes}
	for _, tc := range []struct {
		mode    string
		private bool
		want    *relay.RelayLimit
	}{
		{"", false, relay.DefaultLimit()},
		{"", true, member},
		{"control", true, relay.DefaultLimit()},
		{"member", false, member},
	} {
		if got := relayLimit(tc.mode, tc.private); *got != *tc.want {
			t.Errorf("relayLimit(%q, private %v) = %+v, want %+v", tc.mode, tc.private, *got, *tc.want)
		}
	}
}

func randPeerID(t *testing.T) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRelaySource: configured relays come first, then alive swarm peers
// whose records say they relay, with their direct addresses only; never
// this peer itself, a peer that does not relay, or a relay known only by
// a circuit address.
func TestRelaySource(t *testing.T) {
	self, static, relayer, plain, circuitOnly := randPeerID(t), randPeerID(t), randPeerID(t), randPeerID(t), randPeerID(t)
	v := swarm.NewView(self, swarm.Liveness{})
	now := time.Now()
	circ := "/ip4/198.51.100.10/tcp/4001/p2p/" + static.String() + "/p2p-circuit"
	for i, c := range []gossip.Capability{
		{PeerID: relayer.String(), Relay: true, Addrs: []string{"/ip4/198.51.100.20/tcp/4001", circ}},
		{PeerID: plain.String(), Addrs: []string{"/ip4/198.51.100.21/tcp/4001"}},
		{PeerID: circuitOnly.String(), Relay: true, Addrs: []string{circ}},
		{PeerID: self.String(), Relay: true, Addrs: []string{"/ip4/198.51.100.22/tcp/4001"}},
	} {
		c.Seq = uint64(i + 1)
		v.Observe(&c, now)
	}
	src := &relaySource{self: self, static: []peer.AddrInfo{{ID: static, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/198.51.100.10/tcp/4001")}}}}
	src.view.Store(v)
	var got []peer.AddrInfo
	for ai := range src.candidates(context.Background(), 8) {
		got = append(got, ai)
	}
	if len(got) != 2 || got[0].ID != static || got[1].ID != relayer {
		t.Fatalf("candidates %v, want the configured relay then the relaying peer", got)
	}
	if len(got[1].Addrs) != 1 || got[1].Addrs[0].String() != "/ip4/198.51.100.20/tcp/4001" {
		t.Fatalf("the relaying peer's addresses %v, want its direct one only", got[1].Addrs)
	}
	n := 0
	for range src.candidates(context.Background(), 1) {
		n++
	}
	if n != 1 {
		t.Fatalf("asked for 1 candidate, got %d", n)
	}
}

func relayTestHost(t *testing.T) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestRelayACL: the relay serves peers that speak the swarm's protocols,
// judged after identify, and refuses strangers and banned members; in a
// private swarm holding the key is enough.
func TestRelayACL(t *testing.T) {
	r, member, stranger := relayTestHost(t), relayTestHost(t), relayTestHost(t)
	member.SetStreamHandler(shards.TransferProtocol, func(s network.Stream) { s.Reset() })
	var bannedID peer.ID
	banned := func(id peer.ID) bool { return id == bannedID }
	acl := &relayACL{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	acl.h.Store(&r)
	acl.banned.Store(&banned)
	for _, h := range []host.Host{member, stranger} {
		if err := h.Connect(context.Background(), peer.AddrInfo{ID: r.ID(), Addrs: r.Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	if !acl.AllowReserve(member.ID(), nil) {
		t.Fatal("a swarm member was refused a slot")
	}
	if acl.AllowReserve(stranger.ID(), nil) || acl.AllowConnect(stranger.ID(), nil, member.ID()) {
		t.Fatal("a peer that does not speak the swarm's protocols was served")
	}
	bannedID = member.ID()
	if acl.AllowReserve(member.ID(), nil) {
		t.Fatal("a banned member was given a slot")
	}
	private := &relayACL{log: acl.log, private: true}
	private.h.Store(&r)
	if !private.AllowReserve(stranger.ID(), nil) {
		t.Fatal("a private swarm's relay refused a peer holding the key")
	}
}
