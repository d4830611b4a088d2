package swarm

import (
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	basicconnmgr "github.com/libp2p/go-libp2p/p2p/net/connmgr"
)

// The connections a peer keeps. A table of neighbours bounds the peers a
// peer probes, but not its connections: a DHT lookup connects to the
// peers it asks (a swarm's start, a provide every 10 minutes, a model's
// holders looked up), a newcomer's contact is connected to by every
// newcomer, and libp2p keeps each of those open until the connection
// manager trims past conn_high. Each costs memory (gossipsub alone runs
// four goroutines a connected peer, mesh or not) and, idle, a keepalive
// every 15 s (QUIC) or 30 s (yamux): at 500 simulated peers half of a
// peer's 249 connections were to peers in neither table. So every
// tagEvery a peer closes its connections to a peer it has no use for:
// one older than connIdle, with no stream open but the background ones
// (gossipsub's, identify's, ping's, the DHT's, which kad-dht keeps open
// for reuse), to a peer that is not in its table, not in use or
// protected (WithProtect), did not ask it anything through the record
// exchange within heldFor (its table holds this peer, and probes it over
// that connection), and that nothing else on the host protects or tags
// (a gossipsub mesh peer, a relay), kad-dht's tag of every
// routing-table peer aside. The DHT keeps such peers in its routing table
// and dials them again when a lookup needs them.
const (
	connIdle    = 10 * time.Second
	dhtTag      = "kbucket" // kad-dht's tag (and protection) of each peer in its routing table
	dhtTagValue = 5         // kad-dht's own value of that tag
	connGrace   = time.Minute
)

// ConnManager is the connection manager of a peer of the swarm: libp2p's
// basic one (watermarks low and high, a minute's grace for a new
// connection), except that kad-dht's protection of the peers in its two
// farthest buckets (up to 40 of them, 28 a peer at 200 simulated peers)
// is taken as its tag of every other routing-table peer: they stay in
// the DHT's routing table, connected or not, and closeIdleConns may close
// their connections too. node and the simulation both build it here.
type ConnManager struct {
	*basicconnmgr.BasicConnMgr
}

// NewConnManager builds a peer's connection manager.
func NewConnManager(low, high int) (*ConnManager, error) {
	cm, err := basicconnmgr.NewConnManager(low, high, basicconnmgr.WithGracePeriod(connGrace))
	if err != nil {
		return nil, err
	}
	return &ConnManager{cm}, nil
}

// Protect protects id's connections under tag; kad-dht's protection is
// taken as its tag.
func (m *ConnManager) Protect(id peer.ID, tag string) {
	if tag == dhtTag {
		m.TagPeer(id, dhtTag, dhtTagValue)
		return
	}
	m.BasicConnMgr.Protect(id, tag)
}

// Unprotect removes a protection; kad-dht's is its tag, which it removes
// itself.
func (m *ConnManager) Unprotect(id peer.ID, tag string) bool {
	if tag == dhtTag {
		return m.BasicConnMgr.IsProtected(id, "")
	}
	return m.BasicConnMgr.Unprotect(id, tag)
}

// backgroundProtocols are the prefixes of the protocols whose streams
// stay open on an idle connection.
var backgroundProtocols = []string{"/meshsub/", "/floodsub/", "/ipfs/id/", "/ipfs/ping/", "/libp2p/", DHTPrefix + "/kad/"}

// closeIdleConns closes the connections this peer has no use for (see
// above) and returns to how many peers.
func (s *Service) closeIdleConns(now time.Time) int {
	closed := 0
	for _, id := range s.host.Network().Peers() {
		if s.wantsConn(id, now) {
			continue
		}
		conns := s.host.Network().ConnsToPeer(id)
		busy := len(conns) == 0
		for _, c := range conns {
			if now.Sub(c.Stat().Opened) < connIdle || !idleConn(c) {
				busy = true
				break
			}
		}
		if busy {
			continue
		}
		if err := s.host.Network().ClosePeer(id); err != nil {
			s.log.Debug("idle connection not closed", "peer", id, "err", err)
			continue
		}
		closed++
	}
	if closed > 0 {
		s.log.Debug("idle connections closed", "peers", closed)
	}
	return closed
}

// wantsConn reports whether this peer has a use for its connection to id.
func (s *Service) wantsConn(id peer.ID, now time.Time) bool {
	if _, ok := s.view.Get(id); ok || s.xchg.heldWithin(id, now) {
		return true
	}
	if o := s.view.opts; o.inUse != nil && o.inUse(id) || s.view.kept(id) {
		return true
	}
	cm := s.host.ConnManager()
	if cm.IsProtected(id, "") {
		return true
	}
	if ti := cm.GetTagInfo(id); ti != nil {
		for tag, v := range ti.Tags {
			if tag != dhtTag && v > 0 {
				return true
			}
		}
	}
	return false
}

// idleConn reports whether every stream open on c is a background one.
func idleConn(c network.Conn) bool {
	for _, st := range c.GetStreams() {
		p := string(st.Protocol())
		background := false
		for _, pre := range backgroundProtocols {
			if strings.HasPrefix(p, pre) {
				background = true
				break
			}
		}
		if !background {
			return false
		}
	}
	return true
}

// Tagging the table's peers for the connection manager.
const (
	tableTag   = "swarm-table"
	tableValue = 20
	tagEvery   = 5 * time.Second
)

// tagTable tags the connections of the table's live peers, so that the
// connection manager, trimming, closes others first (a DHT lookup's,
// a peer's that holds this one but is not in its table): the probes of
// the table then run over connections it keeps, not new ones, and a
// neighbour is not cut and redialled each time the manager trims.
func (s *Service) tagTable() {
	cm := s.host.ConnManager()
	live := map[peer.ID]bool{}
	for _, p := range s.view.rows() {
		if p.Alive {
			live[p.ID] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range s.tagged {
		if !live[id] {
			cm.UntagPeer(id, tableTag)
			delete(s.tagged, id)
		}
	}
	for id := range live {
		// Again each time: the manager forgets a peer's tags when its
		// last connection closes.
		cm.TagPeer(id, tableTag, tableValue)
		s.tagged[id] = true
	}
}
