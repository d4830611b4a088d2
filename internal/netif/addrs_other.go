//go:build !android

package netif

import "net"

func interfaceAddrs() ([]net.Addr, error) { return net.InterfaceAddrs() }
