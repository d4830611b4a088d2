// Package netif lists this device's interface addresses where the
// standard library cannot. On Android 11 and later an app may not bind a
// netlink socket, so net.InterfaceAddrs fails ("netlinkrib: permission
// denied", golang/go#40569, go-libp2p#2986) and libp2p, falling back to
// loopback, announces nothing another device can dial. On Android this
// package asks through github.com/wlynxg/anet, which lists addresses
// without binding the socket; elsewhere it is the standard library.
package netif

import (
	"net"
	"strconv"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Addrs are the addresses of this device's interfaces.
func Addrs() ([]net.Addr, error) { return interfaceAddrs() }

// Expand turns each listen address on an unspecified IP (0.0.0.0, ::)
// into one per interface address of the same family, loopback and
// link-local left out, keeping the rest of the address (port, transport).
// Other listen addresses give nothing.
func Expand(listen []ma.Multiaddr, ifaddrs []net.Addr) []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, l := range listen {
		if len(l) < 2 || !manet.IsIPUnspecified(l) {
			continue
		}
		v6 := l[0].Code() == ma.P_IP6
		for _, a := range ifaddrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLoopback() || (ipn.IP.To4() == nil) != v6 || ipn.IP.IsLinkLocalUnicast() {
				continue
			}
			ip := "/ip4/" + ipn.IP.String()
			if v6 {
				ip = "/ip6/" + ipn.IP.String()
			}
			head, err := ma.NewMultiaddr(ip + "/" + l[1].Protocol().Name + "/" + strconv.Itoa(port(l)))
			if err != nil {
				continue
			}
			out = append(out, append(head, l[2:]...))
		}
	}
	return out
}

func port(l ma.Multiaddr) int {
	p, _ := strconv.Atoi(l[1].Value())
	return p
}
