package swarmsim

import (
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/p2p/transport/quicreuse"
	"github.com/marcopolo/simnet"
	"github.com/quic-go/quic-go"
	"go.uber.org/fx"
)

// Link is one peer's access link. A packet from A to B takes
// (A.Latency + B.Latency) / 2, so between two peers with the same link the
// one-way delay is Latency and the round trip twice that.
type Link struct {
	Latency       time.Duration // one-way; default 50 ms
	BitsPerSecond int           // each direction; default 100 Mbit/s
	Loss          float64       // share of the datagrams it sends that are lost, 0..1
}

func (l Link) withDefaults() Link {
	if l.Latency <= 0 {
		l.Latency = 50 * time.Millisecond
	}
	if l.BitsPerSecond <= 0 {
		l.BitsPerSecond = 100_000_000
	}
	return l
}

// Traffic is what one peer sent: UDP payloads (QUIC packets, headers and
// encryption included; IP and UDP headers not).
type Traffic struct {
	Bytes   int64
	Packets int64
}

// endpoint is a peer's UDP socket on the simulated network: simnet's
// socket, with the peer's loss, partition and crash applied to what it
// sends, and what it sends counted.
type endpoint struct {
	*simnet.SimConn
	net  *simNet
	ip   string
	link Link

	down    atomic.Bool  // crashed: sends nothing
	group   atomic.Int32 // partition group; packets cross only within one
	bytes   atomic.Int64
	packets atomic.Int64
}

// WriteTo sends unless the peer crashed (nothing is counted then), the
// destination is across a partition, or the packet is lost; the last two
// are counted, as the sender paid for them. Like UDP it never reports a
// loss.
func (e *endpoint) WriteTo(b []byte, to net.Addr) (int, error) {
	if e.down.Load() {
		return len(b), nil
	}
	e.bytes.Add(int64(len(b)))
	e.packets.Add(1)
	if dst := e.net.lookup(to); dst != nil && dst.group.Load() != e.group.Load() {
		return len(b), nil
	}
	if e.link.Loss > 0 && rand.Float64() < e.link.Loss {
		return len(b), nil
	}
	return e.SimConn.WriteTo(b, to)
}

func (e *endpoint) traffic() Traffic {
	return Traffic{Bytes: e.bytes.Load(), Packets: e.packets.Load()}
}

// simNet is the simulated internet: simnet's router with a latency per
// pair of endpoints.
type simNet struct {
	sim *simnet.Simnet

	mu  sync.RWMutex
	eps map[string]*endpoint // by IP
}

func newNetwork() *simNet {
	n := &simNet{eps: map[string]*endpoint{}}
	n.sim = &simnet.Simnet{LatencyFunc: n.latency}
	return n
}

func (n *simNet) lookup(a net.Addr) *endpoint {
	ua, ok := a.(*net.UDPAddr)
	if !ok {
		return nil
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.eps[ua.IP.String()]
}

func (n *simNet) latency(p *simnet.Packet) time.Duration {
	var d time.Duration
	for _, a := range []net.Addr{p.From, p.To} {
		if e := n.lookup(a); e != nil {
			d += e.link.Latency
		} else {
			d += 50 * time.Millisecond
		}
	}
	return d / 2
}

// endpointAt makes the endpoint of the peer at ip.
func (n *simNet) endpointAt(addr *net.UDPAddr, link Link) *endpoint {
	s := link.BitsPerSecond
	c := n.sim.NewEndpoint(addr, simnet.NodeBiDiLinkSettings{
		Downlink: simnet.LinkSettings{BitsPerSecond: s},
		Uplink:   simnet.LinkSettings{BitsPerSecond: s},
	})
	e := &endpoint{SimConn: c, net: n, ip: addr.IP.String(), link: link}
	n.mu.Lock()
	n.eps[e.ip] = e
	n.mu.Unlock()
	return e
}

// peerIP is the i-th peer's public address, each in a /24 of its own (the
// peer table caps unproven peers per /24, as peers on the internet mostly
// are in different ones).
func peerIP(i int) net.IP {
	return net.IPv4(byte(11+i>>16), byte(i>>8), byte(i), 1)
}

// sourceIP answers quicreuse's question of which local address to send
// from: the endpoint's only one.
type sourceIP struct{ ip atomic.Pointer[net.IP] }

func (s *sourceIP) PreferredSourceIPForDestination(*net.UDPAddr) (net.IP, error) {
	return *s.ip.Load(), nil
}

// quicOn is libp2p's QUIC on the simulated network, as x/simlibp2p's
// QUICSimnet wires it, with the socket made by ep (QUICSimnet's own
// override would replace one given to it).
func quicOn(ep func(*net.UDPAddr) net.PacketConn) libp2p.Option {
	src := &sourceIP{}
	return libp2p.QUICReuse(
		func(l fx.Lifecycle, reset quic.StatelessResetKey, token quic.TokenGeneratorKey, opts ...quicreuse.Option) (*quicreuse.ConnManager, error) {
			cm, err := quicreuse.NewConnManager(reset, token, opts...)
			if err != nil {
				return nil, err
			}
			// A conn manager given to libp2p is not closed by it.
			l.Append(fx.StopHook(cm.Close))
			return cm, nil
		},
		quicreuse.OverrideSourceIPSelector(func() (quicreuse.SourceIPSelector, error) { return src, nil }),
		quicreuse.OverrideListenUDP(func(_ string, a *net.UDPAddr) (net.PacketConn, error) {
			src.ip.Store(&a.IP)
			return ep(a), nil
		}),
	)
}
