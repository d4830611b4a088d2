package node

import (
	"fmt"
	"net"
	"strings"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/pnet"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	noise "github.com/libp2p/go-libp2p/p2p/security/noise"
	tls "github.com/libp2p/go-libp2p/p2p/security/tls"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/llmswarm/llmswarm/internal/version"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/swarm"
)

// Version is the swarmd version announced in identify and capability records.
const Version = version.Release

// newHost builds the libp2p host. With a pre-shared key only TCP is used:
// go-libp2p's QUIC does not support private networks, so QUIC listen
// addresses are dropped (and reported in the returned notes).
func newHost(cfg Config, key crypto.PrivKey, psk pnet.PSK, gater connmgr.ConnectionGater, natOpts []libp2p.Option) (host.Host, []string, error) {
	var notes []string
	listen := cfg.Listen
	if psk != nil {
		var tcpOnly []string
		for _, l := range listen {
			if strings.Contains(l, "/quic") {
				notes = append(notes, "private network: QUIC listener "+l+" dropped (QUIC does not support pre-shared keys)")
				continue
			}
			tcpOnly = append(tcpOnly, l)
		}
		if len(tcpOnly) == 0 {
			return nil, nil, fmt.Errorf("private network needs a TCP listen address; all of %v are QUIC", listen)
		}
		listen = tcpOnly
	}

	if err := checkListenPorts(listen); err != nil {
		return nil, nil, err
	}
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	moa.AddLimits(&limits)
	scaled := limits.Scale(int64(cfg.MemoryLimitMB)<<20, 1024)
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(scaled))
	if err != nil {
		return nil, nil, fmt.Errorf("resource manager: %w", err)
	}
	cm, err := swarm.NewConnManager(cfg.ConnLow, cfg.ConnHigh)
	if err != nil {
		rm.Close()
		return nil, nil, fmt.Errorf("connection manager: %w", err)
	}
	opts := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.ListenAddrStrings(listen...),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Security(tls.ID, tls.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.UserAgent("swarmd/" + Version),
		libp2p.Ping(true),
	}
	if gater != nil {
		opts = append(opts, libp2p.ConnectionGater(gater))
	}
	opts = append(opts, natOpts...)
	if psk != nil {
		opts = append(opts, libp2p.PrivateNetwork(psk))
	} else {
		opts = append(opts, libp2p.Transport(quic.NewTransport))
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		cm.Close()
		rm.Close()
		return nil, nil, fmt.Errorf("starting libp2p on %v: %w", listen, err)
	}
	return h, notes, nil
}

// checkListenPorts binds each fixed TCP/UDP listen port briefly, so a port
// in use is reported by address before libp2p starts (a failed libp2p
// start also leaks its background workers).
func checkListenPorts(listen []string) error {
	for _, l := range listen {
		m, err := ma.NewMultiaddr(l)
		if err != nil {
			return fmt.Errorf("listen address %q: %w", l, err)
		}
		network, addr, err := manet.DialArgs(m)
		if err != nil {
			continue // not a plain IP address (e.g. DNS): libp2p reports it
		}
		if strings.HasSuffix(addr, ":0") {
			continue
		}
		switch {
		case strings.HasPrefix(network, "tcp"):
			ln, err := net.Listen(network, addr)
			if err != nil {
				return fmt.Errorf("listen address %s: %w", l, err)
			}
			ln.Close()
		case strings.HasPrefix(network, "udp"):
			pc, err := net.ListenPacket(network, addr)
			if err != nil {
				return fmt.Errorf("listen address %s: %w", l, err)
			}
			pc.Close()
		}
	}
	return nil
}
