package nat

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	natpmp "github.com/jackpal/go-nat-pmp"
	"github.com/libp2p/go-libp2p/core/host"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// pmpMapper maps this peer's listening ports on its default gateway by
// NAT-PMP where UPnP mapped nothing. libp2p's own port mapper speaks
// NAT-PMP too, but go-libp2p v0.51 never finds the gateway for it on
// Linux (it asks go-netroute for the route to 0.0.0.0, which refuses), so
// routers that speak only NAT-PMP (or PCP's NAT-PMP compatibility) mapped
// nothing. The mapped addresses join the host's addresses through its
// address factory, and so this peer's records.
type pmpMapper struct {
	h      host.Host
	log    *slog.Logger
	addrs  atomic.Pointer[[]ma.Multiaddr] // mapped, external
	wg     sync.WaitGroup
	cancel context.CancelFunc

	mu      sync.Mutex
	client  *natpmp.Client
	mapping []pmpPort
}

type pmpPort struct {
	proto    string // "tcp" or "udp"
	internal int
}

const (
	pmpStartDelay = 6 * time.Second // UPnP first: libp2p's discovery takes about 5 s
	pmpRetry      = 5 * time.Minute // after no gateway answered
	pmpLifetime   = 2 * time.Hour   // asked for; renewed at half
	pmpTimeout    = 2 * time.Second // per request, retries included
	maxPMPPorts   = 8
)

// extra is the address factory's addition: the mapped addresses.
func (m *pmpMapper) extra(in []ma.Multiaddr) []ma.Multiaddr {
	if p := m.addrs.Load(); p != nil {
		return append(in, *p...)
	}
	return in
}

// start maps, renews and, on stop, removes the mappings.
func (m *pmpMapper) start(h host.Host) {
	m.h = h
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.wg.Add(1)
	go m.run(ctx)
}

func (m *pmpMapper) stop() {
	if m.cancel == nil {
		return
	}
	m.cancel()
	m.wg.Wait()
	m.unmap()
}

func (m *pmpMapper) run(ctx context.Context) {
	defer m.wg.Done()
	wait := pmpStartDelay
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		switch {
		case m.upnpMapped():
			m.unmap() // UPnP did it: no second mapping, none left to lapse unrenewed
			wait = pmpRetry
		default:
			lifetime, err := m.mapAll()
			if err != nil {
				m.log.Debug("nat: no NAT-PMP mapping", "err", err)
				m.addrs.Store(nil)
				wait = pmpRetry
			} else {
				wait = lifetime / 2
			}
		}
	}
}

// upnpMapped reports whether the host already announces a public direct
// address that is not one of this mapper's.
func (m *pmpMapper) upnpMapped() bool {
	mine := m.addrs.Load()
	for _, a := range m.h.Addrs() {
		if _, err := a.ValueForProtocol(ma.P_CIRCUIT); err == nil || !manet.IsPublicAddr(a) {
			continue
		}
		if mine != nil && ma.Contains(*mine, a) {
			continue
		}
		return true
	}
	return false
}

// mapAll asks the gateway for each listening port and publishes the
// external addresses; it returns the shortest lifetime granted.
func (m *pmpMapper) mapAll() (time.Duration, error) {
	gw, err := defaultGateway()
	if err != nil {
		return 0, err
	}
	c := natpmp.NewClientWithTimeout(gw, pmpTimeout)
	ext, err := c.GetExternalAddress()
	if err != nil {
		return 0, fmt.Errorf("gateway %s: %w", gw, err)
	}
	extIP := net.IP(ext.ExternalIPAddress[:])
	var out []ma.Multiaddr
	var ports []pmpPort
	lifetime := pmpLifetime
	for _, l := range m.h.Network().ListenAddresses() {
		proto, port, ok := listenPort(l)
		if !ok || len(ports) >= maxPMPPorts {
			continue
		}
		res, err := c.AddPortMapping(proto, port, port, int(pmpLifetime.Seconds()))
		if err != nil {
			m.log.Debug("nat: NAT-PMP refused a port", "proto", proto, "port", port, "err", err)
			continue
		}
		ports = append(ports, pmpPort{proto, port})
		if got := time.Duration(res.PortMappingLifetimeInSeconds) * time.Second; got > 0 && got < lifetime {
			lifetime = got
		}
		a, err := externalAddr(l, extIP, int(res.MappedExternalPort))
		if err == nil {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return 0, errors.New("the gateway mapped no port")
	}
	prev := m.addrs.Swap(&out)
	m.mu.Lock()
	m.client, m.mapping = c, ports
	m.mu.Unlock()
	if prev == nil || !ma.Contains(*prev, out[0]) {
		m.log.Info("nat: ports mapped by NAT-PMP", "gateway", gw, "addrs", out, "lifetime", lifetime)
	}
	return max(lifetime, time.Minute), nil
}

// unmap removes the mappings (a zero lifetime deletes), waiting at most
// pmpTimeout for a gateway that no longer answers.
func (m *pmpMapper) unmap() {
	m.mu.Lock()
	c, ports := m.client, m.mapping
	m.client, m.mapping = nil, nil
	m.mu.Unlock()
	m.addrs.Store(nil)
	if len(ports) == 0 {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, p := range ports {
			c.AddPortMapping(p.proto, p.internal, 0, 0)
		}
	}()
	select {
	case <-done:
	case <-time.After(pmpTimeout):
	}
}

// listenPort is the transport and port of a listening address worth
// mapping (IPv4 TCP or UDP).
func listenPort(l ma.Multiaddr) (string, int, bool) {
	if len(l) < 2 || l[0].Code() != ma.P_IP4 {
		return "", 0, false
	}
	var proto string
	switch l[1].Code() {
	case ma.P_TCP:
		proto = "tcp"
	case ma.P_UDP:
		proto = "udp"
	default:
		return "", 0, false
	}
	port, err := strconv.Atoi(l[1].Value())
	if err != nil || port == 0 {
		return "", 0, false
	}
	return proto, port, true
}

// externalAddr is l with its IP and port replaced by the mapped ones.
func externalAddr(l ma.Multiaddr, ip net.IP, port int) (ma.Multiaddr, error) {
	head, err := ma.NewMultiaddr(fmt.Sprintf("/ip4/%s/%s/%d", ip, l[1].Protocol().Name, port))
	if err != nil {
		return nil, err
	}
	return append(head, l[2:]...), nil
}

// defaultGateway reads the IPv4 default route's gateway from the kernel
// (Linux, Android).
func defaultGateway() (net.IP, error) {
	f, err := os.Open("/proc/net/route")
	if err != nil {
		return nil, fmt.Errorf("default gateway: %w", err)
	}
	defer f.Close()
	return parseRouteTable(f)
}

// parseRouteTable finds the default route in /proc/net/route's format.
func parseRouteTable(f interface{ Read([]byte) (int, error) }) (net.IP, error) {
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[1] != "00000000" {
			continue
		}
		flags, err := strconv.ParseUint(fields[3], 16, 16)
		if err != nil || flags&0x2 == 0 { // RTF_GATEWAY
			continue
		}
		b, err := hex.DecodeString(fields[2])
		if err != nil || len(b) != 4 {
			continue
		}
		ip := make(net.IP, 4)
		binary.BigEndian.PutUint32(ip, binary.LittleEndian.Uint32(b))
		return ip, nil
	}
	return nil, errors.New("default gateway: no default route")
}
