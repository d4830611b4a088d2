package nat

import (
	"fmt"
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"
)

// TestPunchable: an observation counts for a connection from one of this
// peer's listening sockets (the port a punch partner can reach), with the
// same transport; for one from an ephemeral port only when the NAT kept
// that port (then it keeps the listener's: the listener's port is what
// counts), never when it changed it.
func TestPunchable(t *testing.T) {
	h := relayTestHost(t)
	p := &puncher{h: h}
	listen := h.Network().ListenAddresses()[0]
	port, _ := listen.ValueForProtocol(ma.P_TCP)
	obs := ma.StringCast("/ip4/1.2.3.4/tcp/4001")
	for _, tc := range []struct {
		local string
		obs   ma.Multiaddr
		want  string
	}{
		{"/ip4/127.0.0.1/tcp/" + port, obs, "/ip4/1.2.3.4/tcp/4001"},
		{"/ip4/127.0.0.1/tcp/1", obs, ""},                                                  // an ephemeral port the NAT changed
		{"/ip4/127.0.0.1/tcp/4001", obs, "/ip4/1.2.3.4/tcp/" + port},                       // one it kept
		{"/ip4/127.0.0.2/tcp/" + port, obs, ""},                                            // another address
		{"/ip4/127.0.0.2/tcp/4001", obs, ""},                                               // another address, port kept
		{"/ip4/127.0.0.1/tcp/" + port, ma.StringCast("/ip4/1.2.3.4/udp/4001/quic-v1"), ""}, // another transport
	} {
		got := p.punchable(ma.StringCast(tc.local), tc.obs)
		if s := fmt.Sprint(got); got == nil && tc.want != "" || got != nil && s != tc.want {
			t.Errorf("punchable(%s, %s) = %v, want %q", tc.local, tc.obs, got, tc.want)
		}
	}
}

// TestReachabilityPrecedence: a forced reachability wins; otherwise an
// address AutoNAT v2 confirmed makes the peer public, and v1 decides
// when v2 has confirmed none.
func TestReachabilityPrecedence(t *testing.T) {
	var r reachability
	set := func(v1, v2 network.Reachability) {
		r.v1.Store(int32(v1))
		r.v2.Store(int32(v2))
	}
	pub, priv, unk := network.ReachabilityPublic, network.ReachabilityPrivate, network.ReachabilityUnknown
	for _, tc := range []struct {
		forced bool
		v1, v2 network.Reachability
		want   network.Reachability
	}{
		{false, unk, unk, unk},
		{false, priv, pub, pub},
		{false, pub, priv, pub},
		{false, priv, priv, priv},
		{false, unk, priv, priv},
		{true, priv, pub, priv},
		{true, pub, unk, pub},
	} {
		r.forced = tc.forced
		set(tc.v1, tc.v2)
		if got := r.get(); got != tc.want {
			t.Errorf("forced %v, v1 %v, v2 %v: %v, want %v", tc.forced, tc.v1, tc.v2, got, tc.want)
		}
	}
}
