package gossip

import (
	"net"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	manet "github.com/multiformats/go-multiaddr/net"
)

// loopbackCrowd is the IP-colocation factor (P6) for loopback addresses,
// which go-libp2p-pubsub leaves out of its own count (for its unit tests):
// fifty identities on 127.0.0.1 weigh on this peer as fifty on any other
// address do. It is added to the application score, in the same units
// (Colocation.Weight × surplus²). Tests that run many peers on loopback
// say so by whitelisting it (Colocation.Whitelist, 127.0.0.0/8).
type loopbackCrowd struct {
	net network.Network
	col Colocation

	mu    sync.Mutex
	at    time.Time
	byIP  map[string]int       // loopback IP -> peers connected from it
	ipsOf map[peer.ID][]string // peer -> loopback IPs it is connected from
}

// loopbackRefresh is how stale the counts may be: the score is read far
// more often than connections come and go.
const loopbackRefresh = time.Second

// penalty is p's share of the factor (0 or negative).
func (l *loopbackCrowd) penalty(p peer.ID) float64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.at) > loopbackRefresh {
		l.count()
	}
	surplus := 0.0
	for _, ip := range l.ipsOf[p] {
		if n := l.byIP[ip] - l.col.Threshold; n > 0 {
			surplus += float64(n * n)
		}
	}
	return l.col.Weight * surplus
}

// count recounts the peers connected from each loopback address not
// whitelisted. l.mu must be held.
func (l *loopbackCrowd) count() {
	l.at = time.Now()
	peersAt := map[string]map[peer.ID]bool{}
	l.ipsOf = map[peer.ID][]string{}
	for _, c := range l.net.Conns() {
		ip, err := manet.ToIP(c.RemoteMultiaddr())
		if err != nil || !ip.IsLoopback() || l.whitelisted(ip) {
			continue
		}
		k := ip.String()
		if peersAt[k] == nil {
			peersAt[k] = map[peer.ID]bool{}
		}
		p := c.RemotePeer()
		if !peersAt[k][p] {
			peersAt[k][p] = true
			l.ipsOf[p] = append(l.ipsOf[p], k)
		}
	}
	l.byIP = map[string]int{}
	for k, ps := range peersAt {
		l.byIP[k] = len(ps)
	}
}

func (l *loopbackCrowd) whitelisted(ip net.IP) bool {
	for _, n := range l.col.Whitelist {
		if n.Contains(ip) {
			return true
		}
	}
	return false
}
