package swarmsim

import (
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/swarm"
)

// Poll is how often the harness's waits look (simulated time).
const Poll = 50 * time.Millisecond

// WaitUntil polls cond every Poll of simulated time until it holds, and
// returns how long that took; an error after limit.
func WaitUntil(limit time.Duration, cond func() bool) (time.Duration, error) {
	start := time.Now()
	for !cond() {
		if d := time.Since(start); d > limit {
			return d, fmt.Errorf("swarmsim: not so after %s", limit)
		}
		time.Sleep(Poll)
	}
	return time.Since(start), nil
}

// SeesAll reports whether p holds every other live peer alive.
func (s *Sim) SeesAll(p *Peer) bool {
	v := p.Service.View()
	for _, q := range s.Live() {
		if q != p && !v.Alive(q.ID()) {
			return false
		}
	}
	return true
}

// Settled reports whether p's table is as full as the swarm allows: it
// holds every other live peer alive, or, in a swarm larger than its bound
// of neighbours, at least that many live peers alive (and no peer alive
// that is gone).
func (s *Sim) Settled(p *Peer) bool {
	if s.cfg.Neighbours < 0 || len(s.Live())-1 <= s.cfg.Neighbours {
		return s.SeesAll(p)
	}
	alive := 0
	for _, q := range s.Peers() {
		if q != p && p.Service.View().Alive(q.ID()) {
			if q.Gone() {
				return false
			}
			alive++
		}
	}
	return alive >= s.cfg.Neighbours
}

// Settle waits until every live peer's table is as full as the swarm
// allows (Settled), and returns how long that took. logf (nil: none)
// hears every 10 s of simulated time how far it got.
func (s *Sim) Settle(limit time.Duration, logf func(string, ...any)) (time.Duration, error) {
	start, next := time.Now(), 10*time.Second
	return WaitUntil(limit, func() bool {
		live := s.Live()
		done, alive := 0, 0
		for _, p := range live {
			n := p.Service.View().Peers()
			for _, q := range n {
				if q.Alive {
					alive++
				}
			}
			if s.Settled(p) {
				done++
			}
		}
		if logf != nil && time.Since(start) >= next {
			next += 10 * time.Second
			logf("settling for %s: %d of %d peers settled; %.1f alive rows per peer; %s",
				time.Since(start), done, len(live), float64(alive)/float64(len(live)), s.Tables())
		}
		return done == len(live)
	})
}

// Rates is the traffic of a set of peers over a window, per peer and
// second.
type Rates struct {
	Peers                      int
	Window                     time.Duration
	MeanBytes, MedianBytes     float64 // bytes/s sent per peer
	MaxBytes                   float64
	MeanPackets, MedianPackets float64       // datagrams/s sent per peer
	Protocols                  ProtocolRates // stream bytes/s sent per peer, by protocol
	// The peer that sent the most: its index, whether it is a seed, and
	// its stream bytes/s by protocol.
	MaxIndex     int
	MaxSeed      bool
	MaxProtocols ProtocolRates
}

func (r Rates) String() string {
	busiest := "a peer"
	if r.MaxSeed {
		busiest = "a seed"
	}
	return fmt.Sprintf("%d peers over %s: %.1f KiB/s per peer (median %.1f, max %.1f: %s, peer %d, streams %s), %.0f packets/s (median %.0f); streams: %s",
		r.Peers, r.Window, r.MeanBytes/1024, r.MedianBytes/1024, r.MaxBytes/1024, busiest, r.MaxIndex, r.MaxProtocols,
		r.MeanPackets, r.MedianPackets, r.Protocols)
}

// Measure lets window of simulated time pass and returns what the live
// peers sent in it.
func (s *Sim) Measure(window time.Duration) Rates {
	peers := s.Live()
	before := make([]Traffic, len(peers))
	protos := make([]map[protocol.ID]int64, len(peers))
	for i, p := range peers {
		before[i], protos[i] = p.Traffic(), p.protos.snapshot()
	}
	start := time.Now()
	time.Sleep(window)
	secs := time.Since(start).Seconds()
	r := Rates{Peers: len(peers), Window: time.Since(start)}
	var bs, ps []float64
	var maxB float64
	r.Protocols = ProtocolRates{}
	for i, p := range peers {
		if p.Gone() {
			continue
		}
		mine := ProtocolRates{}
		for id, n := range p.protos.snapshot() {
			mine[id] = float64(n-protos[i][id]) / secs
			r.Protocols[id] += mine[id] / float64(len(peers))
		}
		t := p.Traffic()
		b := float64(t.Bytes-before[i].Bytes) / secs
		if len(bs) == 0 || b > maxB {
			maxB = b
			r.MaxIndex, r.MaxSeed, r.MaxProtocols = p.Index, p.Index < s.cfg.Seeds, mine
		}
		bs = append(bs, b)
		ps = append(ps, float64(t.Packets-before[i].Packets)/secs)
	}
	r.MeanBytes, r.MedianBytes, r.MaxBytes = stats(bs)
	r.MeanPackets, r.MedianPackets, _ = stats(ps)
	return r
}

func stats(xs []float64) (mean, median, maxv float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	slices.Sort(xs)
	for _, x := range xs {
		mean += x
	}
	return mean / float64(len(xs)), xs[len(xs)/2], xs[len(xs)-1]
}

// Tables is the size of what the live peers keep.
type Tables struct {
	MeanRows, MaxRows   float64 // rows of the peer table (alive or not, itself included)
	MeanAlive           float64 // of them alive
	MeanConns, MaxConns float64 // open libp2p connections of a peer, seeds aside
	SeedConns           float64 // of the busiest seed
	// Of a peer's connections, on average: to a peer in both tables (its
	// and the other's), in its own only, in the other's only, in neither
	// (a DHT lookup's, a seed's).
	ConnsBoth, ConnsMine, ConnsTheirs, ConnsNeither float64
}

func (t Tables) String() string {
	return fmt.Sprintf("peer table %.0f rows (max %.0f, %.0f alive), %.0f connections (max %.0f, a seed %.0f; tables: both %.0f, own %.0f, other's %.0f, neither %.0f)",
		t.MeanRows, t.MaxRows, t.MeanAlive, t.MeanConns, t.MaxConns, t.SeedConns, t.ConnsBoth, t.ConnsMine, t.ConnsTheirs, t.ConnsNeither)
}

// Tables reads every live peer's table and connections.
func (s *Sim) Tables() Tables {
	var rows, alive, conns []float64
	live := s.Live()
	byID := make(map[peer.ID]*Peer, len(live))
	for _, p := range live {
		byID[p.ID()] = p
	}
	var t Tables
	for _, p := range live {
		for _, c := range p.Host.Network().Conns() {
			q := byID[c.RemotePeer()]
			mine := p.Service.View().Alive(c.RemotePeer())
			theirs := q != nil && q.Service.View().Alive(p.ID())
			switch {
			case mine && theirs:
				t.ConnsBoth++
			case mine:
				t.ConnsMine++
			case theirs:
				t.ConnsTheirs++
			default:
				t.ConnsNeither++
			}
		}
	}
	if n := float64(len(live)); n > 0 {
		t.ConnsBoth, t.ConnsMine, t.ConnsTheirs, t.ConnsNeither = t.ConnsBoth/n, t.ConnsMine/n, t.ConnsTheirs/n, t.ConnsNeither/n
	}
	for _, p := range live {
		ps := p.Service.View().Peers()
		n := 0
		for _, q := range ps {
			if q.Alive {
				n++
			}
		}
		rows = append(rows, float64(len(ps)))
		alive = append(alive, float64(n))
		if p.Index < s.cfg.Seeds {
			t.SeedConns = max(t.SeedConns, float64(len(p.Host.Network().Conns())))
			continue // every newcomer dials a seed: not a peer like the others
		}
		conns = append(conns, float64(len(p.Host.Network().Conns())))
	}
	t.MeanRows, _, t.MaxRows = stats(rows)
	t.MeanAlive, _, _ = stats(alive)
	t.MeanConns, _, t.MaxConns = stats(conns)
	return t
}

// Holders returns the live peers whose Spec holds layers of model.
func (s *Sim) Holders(model string) []*Peer {
	var out []*Peer
	for _, p := range s.Live() {
		for _, sh := range p.Spec.Shards {
			if sh.ModelCID == model {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// Covers reports whether p's view holds every live holder of model.
func (s *Sim) Covers(p *Peer, model string) bool {
	seen := map[peer.ID]bool{}
	for _, h := range p.Service.View().HoldersOf(model) {
		seen[h.Peer.ID] = true
	}
	for _, h := range s.Holders(model) {
		if !seen[h.ID()] {
			return false
		}
	}
	return true
}

// SeesRole reports whether p's view holds every live peer whose Spec
// serves role.
func (s *Sim) SeesRole(p *Peer, role string) bool {
	seen := map[peer.ID]bool{}
	for _, h := range p.Service.View().ByRole(role) {
		seen[h.Peer.ID] = true
	}
	for _, q := range s.Live() {
		for _, r := range q.Spec.Roles {
			if r.Role == role && !seen[q.ID()] {
				return false
			}
		}
	}
	return true
}

// Route assembles p's pipeline route for model as the originator plans
// it (pipeline.AssembleRoute over the view's live holders of the model's
// shape, leaving out peers the view does not hold routable); it does not
// vet the peers (no inference runs in the simulation).
func Route(p *Peer, model string, layers int) (pipeline.Route, error) {
	return RouteIn(p.Service.View(), p.ID(), model, layers)
}

// RouteIn is Route over any view, self's.
func RouteIn(v *swarm.View, self peer.ID, model string, layers int) (pipeline.Route, error) {
	return routeIn(v, self, model, layers, nil)
}

// routeIn is RouteIn without the peers in avoid, as node's replan leaves
// out the peers that failed the request.
func routeIn(v *swarm.View, self peer.ID, model string, layers int, avoid map[peer.ID]bool) (pipeline.Route, error) {
	var hs []pipeline.Holder
	for _, h := range v.HoldersOf(model) {
		if h.Shard.Layers != layers || avoid[h.Peer.ID] || (h.Peer.ID != self && !h.Peer.Cap.TakesWork()) {
			continue
		}
		hs = append(hs, pipeline.Holder{Peer: h.Peer.ID.String(), Start: h.Shard.Start, End: h.Shard.End,
			MsPerLayer: h.Shard.MsPerLayer})
	}
	return pipeline.AssembleRoute(layers, pipeline.EndCost{}, hs, func(id string) bool {
		pid, err := peer.Decode(id)
		return err != nil || !v.Routable(pid)
	})
}
