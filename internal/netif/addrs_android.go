//go:build android

package netif

import (
	"net"

	"github.com/wlynxg/anet"
)

func interfaceAddrs() ([]net.Addr, error) { return anet.InterfaceAddrs() }
