package netif

import (
	"net"
	"slices"
	"testing"

	ma "github.com/multiformats/go-multiaddr"
)

func TestExpand(t *testing.T) {
	cidr := func(s string) net.Addr {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		n.IP = ip
		return n
	}
	ifaddrs := []net.Addr{cidr("127.0.0.1/8"), cidr("192.168.1.20/24"), cidr("10.0.0.5/8"), cidr("::1/128"),
		cidr("fe80::1/64"), cidr("2001:db8::7/64")}
	var listen []ma.Multiaddr
	for _, s := range []string{"/ip4/0.0.0.0/tcp/7434", "/ip4/0.0.0.0/udp/7434/quic-v1", "/ip6/::/tcp/7434", "/ip4/192.168.1.20/tcp/9000", "/p2p-circuit"} {
		listen = append(listen, ma.StringCast(s))
	}
	var got []string
	for _, a := range Expand(listen, ifaddrs) {
		got = append(got, a.String())
	}
	want := []string{"/ip4/192.168.1.20/tcp/7434", "/ip4/10.0.0.5/tcp/7434", "/ip4/192.168.1.20/udp/7434/quic-v1",
		"/ip4/10.0.0.5/udp/7434/quic-v1", "/ip6/2001:db8::7/tcp/7434"}
	if !slices.Equal(got, want) {
		t.Fatalf("Expand:\n got %v\nwant %v", got, want)
	}
}

// TestAddrs: on this machine (not Android) the standard library answers;
// the loopback address is among them.
func TestAddrs(t *testing.T) {
	as, err := Addrs()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range as {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.IsLoopback() {
			found = true
		}
	}
	if !found {
		t.Fatalf("no loopback address among %v", as)
	}
}
