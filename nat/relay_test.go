package nat

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/proto"
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
// that offer the relay protocol, proven ones first, with their direct
// addresses only; never this peer, a peer that does not relay, a banned
// one, one known only by a circuit address, or a second one from the same
// /24.
func TestRelaySource(t *testing.T) {
	h := relayTestHost(t)
	self := h.ID()
	static, relayer, proven, plain, circuitOnly, banned, sameNet := randPeerID(t), randPeerID(t), randPeerID(t),
		randPeerID(t), randPeerID(t), randPeerID(t), randPeerID(t)
	v := swarm.NewView(self, swarm.Liveness{})
	ledger := swarm.NewTrust()
	ledger.Pass(proven, swarm.Claim{Model: "m", Start: 0, End: 1})
	ledger.Fail(banned, "lied")
	now := time.Now()
	circ := "/ip4/198.51.100.10/tcp/4001/p2p/" + static.String() + "/p2p-circuit"
	for i, c := range []struct {
		id   peer.ID
		addr string // seen from
		cap  []string
	}{
		{relayer, "198.51.100.20", []string{"/ip4/198.51.100.20/tcp/4001", circ}},
		{proven, "203.0.113.5", []string{"/ip4/203.0.113.5/tcp/4001"}},
		{plain, "198.51.101.21", []string{"/ip4/198.51.101.21/tcp/4001"}},
		{circuitOnly, "198.51.102.1", []string{circ}},
		{banned, "198.51.103.1", []string{"/ip4/198.51.103.1/tcp/4001"}},
		{sameNet, "198.51.100.30", []string{"/ip4/198.51.100.30/tcp/4001"}},
		{self, "", []string{"/ip4/198.51.100.22/tcp/4001"}},
	} {
		v.ObserveFrom(&gossip.Capability{PeerID: c.id.String(), Seq: uint64(i + 1), Addrs: c.cap}, now, netipAddr(c.addr))
		if c.id != plain {
			h.Peerstore().AddProtocols(c.id, proto.ProtoIDv2Hop)
		}
	}
	src := &relaySource{ledger: ledger, static: []peer.AddrInfo{{ID: static, Addrs: []ma.Multiaddr{ma.StringCast("/ip4/198.51.100.10/tcp/4001")}}}}
	src.view.Store(v)
	src.h.Store(&h)
	var got []peer.ID
	var relayerAddrs []ma.Multiaddr
	for ai := range src.candidates(context.Background(), 8) {
		got = append(got, ai.ID)
		if ai.ID == relayer || ai.ID == sameNet {
			relayerAddrs = ai.Addrs
		}
	}
	// relayer and sameNet share a /24: one of them, whichever came first.
	if len(got) != 3 || got[0] != static || got[1] != proven || (got[2] != relayer && got[2] != sameNet) {
		t.Fatalf("candidates %v, want the configured relay, the proven relaying peer, then one of the /24's", got)
	}
	if len(relayerAddrs) != 1 || relayerAddrs[0].String() == circ {
		t.Fatalf("a relaying peer's addresses %v, want its direct one only", relayerAddrs)
	}
	n := 0
	for range src.candidates(context.Background(), 1) {
		n++
	}
	if n != 1 {
		t.Fatalf("asked for 1 candidate, got %d", n)
	}
}

func netipAddr(s string) netip.Addr {
	if s == "" {
		return netip.Addr{}
	}
	return netip.MustParseAddr(s)
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
// judged after identify; it refuses strangers and banned members; in a
// private swarm holding the key is enough.
func TestRelayACL(t *testing.T) {
	r, member, stranger := relayTestHost(t), relayTestHost(t), relayTestHost(t)
	member.SetStreamHandler(shards.TransferProtocol, func(s network.Stream) { s.Reset() })
	var bannedID peer.ID
	banned := func(id peer.ID) bool { return id == bannedID }
	acl := &relayACL{log: slog.New(slog.NewTextHandler(io.Discard, nil)), wait: 300 * time.Millisecond}
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
	private := &relayACL{log: acl.log, private: true, wait: acl.wait}
	private.h.Store(&r)
	if !private.AllowReserve(stranger.ID(), nil) {
		t.Fatal("a private swarm's relay refused a peer holding the key")
	}
}
