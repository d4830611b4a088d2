package node

import (
	"net"
	"strings"
	"testing"

	ma "github.com/multiformats/go-multiaddr"
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
