package nat

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"
)

// TestFromListener: an observation counts only for a connection from one
// of this peer's listening sockets (the port a punch partner can reach),
// with the same transport.
func TestFromListener(t *testing.T) {
	h := relayTestHost(t)
	p := &puncher{h: h}
	listen := h.Network().ListenAddresses()[0]
	port, _ := listen.ValueForProtocol(ma.P_TCP)
	obs := ma.StringCast("/ip4/1.2.3.4/tcp/4001")
	for _, tc := range []struct {
		local string
		obs   ma.Multiaddr
		want  bool
	}{
		{"/ip4/127.0.0.1/tcp/" + port, obs, true},
		{"/ip4/127.0.0.1/tcp/1", obs, false},                                                  // an ephemeral port
		{"/ip4/127.0.0.2/tcp/" + port, obs, false},                                            // another address
		{"/ip4/127.0.0.1/tcp/" + port, ma.StringCast("/ip4/1.2.3.4/udp/4001/quic-v1"), false}, // another transport
	} {
		if got := p.fromListener(ma.StringCast(tc.local), tc.obs); got != tc.want {
			t.Errorf("fromListener(%s, %s) = %v, want %v", tc.local, tc.obs, got, tc.want)
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
