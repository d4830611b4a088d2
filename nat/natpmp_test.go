package nat

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/llmswarm/llmswarm/internal/netif"
)

func TestParseRouteTable(t *testing.T) {
	table := `Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth0	0071CBCB	00000000	0001	0	0	0	00FFFFFF	0	0	0
eth0	00000000	017100CB	0003	0	0	0	00000000	0	0	0
`
	gw, err := parseRouteTable(strings.NewReader(table))
	if err != nil || !gw.Equal(net.ParseIP("203.0.113.1")) {
		t.Fatalf("gateway %v, %v; want 203.0.113.1", gw, err)
	}
	for name, bad := range map[string]string{
		"no default route": "Iface\tDestination\tGateway\tFlags\neth0\t0071CBCB\t00000000\t0001\n",
		"not a gateway":    "Iface\tDestination\tGateway\tFlags\neth0\t00000000\t0171CBCB\t0001\n",
		"garbage":          "Iface\tDestination\tGateway\tFlags\neth0\t00000000\tzz\t0003\n",
		"empty":            "",
	} {
		if gw, err := parseRouteTable(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: gateway %v, want an error", name, gw)
		}
	}
}

func TestPMPAddresses(t *testing.T) {
	for _, tc := range []struct {
		listen, want string
	}{
		{"/ip4/203.0.113.10/tcp/4001", "/ip4/1.2.3.2/tcp/5001"},
		{"/ip4/0.0.0.0/udp/7434/quic-v1", "/ip4/1.2.3.2/udp/5001/quic-v1"},
		{"/ip6/::/tcp/4001", ""}, // NAT-PMP maps IPv4
		{"/ip4/203.0.113.10/tcp/0", ""},
	} {
		l := ma.StringCast(tc.listen)
		proto, port, ok := listenPort(l)
		if !ok {
			if tc.want != "" {
				t.Errorf("%s: not mapped, want %s", tc.listen, tc.want)
			}
			continue
		}
		a, err := externalAddr(l, net.ParseIP("1.2.3.2").To4(), 5001)
		if err != nil || a.String() != tc.want || (proto != "tcp" && proto != "udp") || port == 0 {
			t.Errorf("%s: %v (%s %d), %v; want %s", tc.listen, a, proto, port, err, tc.want)
		}
	}
}

// TestAddrsFactoryFallback: where libp2p could list no interface address
// (Android 11+), the factory adds one per interface address for each
// unspecified listener; where it could, the factory leaves its list.
func TestAddrsFactoryFallback(t *testing.T) {
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/0.0.0.0/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	s := &Service{}
	s.h.Store(&h)
	port, _ := h.Network().ListenAddresses()[0].ValueForProtocol(ma.P_TCP)
	loop := ma.StringCast("/ip4/127.0.0.1/tcp/" + port)
	ifs, err := netif.Addrs()
	if err != nil {
		t.Fatal(err)
	}
	want := append([]ma.Multiaddr{loop}, netif.Expand(h.Network().ListenAddresses(), ifs)...)
	got := s.addrs([]ma.Multiaddr{loop})
	if len(got) != len(want) || len(want) > 1 && !slices.ContainsFunc(got, dialable) {
		t.Fatalf("loopback only in: %v, want %v", got, want)
	}
	lan := ma.StringCast("/ip4/192.0.2.7/tcp/" + port)
	if got := s.addrs([]ma.Multiaddr{loop, lan}); len(got) != 2 {
		t.Fatalf("with a dialable address in: %v, want it as it is", got)
	}
}
