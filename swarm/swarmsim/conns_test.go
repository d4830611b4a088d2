package swarmsim

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestIdleConnsClosed: a swarm larger than its bound of neighbours
// leaves connections behind its start (the DHT's first lookups, the
// newcomers' probes of their contact's sample); of those older than a
// minute, to a peer in neither table, no seed and no gossipsub mesh peer
// (protected), none is left open 11 minutes on (past the record
// exchange's memory of askers), while every table stays full and alive.
func TestIdleConnsClosed(t *testing.T) {
	const n, bound = 16, 4
	synctest.Test(t, func(t *testing.T) {
		s := New(Config{Link: Link{Latency: 50 * time.Millisecond}, Neighbours: bound})
		defer s.Close()
		for range n {
			if _, err := s.Add(Spec{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Settle(time.Minute, nil); err != nil {
			t.Fatal(err)
		}
		before := s.strayConns(0)
		time.Sleep(11 * time.Minute)
		after := s.strayConns(time.Minute)
		t.Logf("SIMCONNS connections to peers in neither table: %d after settling, %d older than a minute 11 min on; %s", before, after, s.Tables())
		if before == 0 {
			t.Fatalf("no connection to a peer in neither table after settling: the test shows nothing")
		}
		if after != 0 {
			t.Errorf("%d connections older than a minute to peers in neither table are still open: want none", after)
		}
		for _, p := range s.Live() {
			if !s.Settled(p) {
				t.Errorf("peer %d: table no longer full: %s", p.Index, s.Tables())
			}
		}
	})
}

// strayConns counts the connections, older than age, between two live
// peers neither of which holds the other in its table or protects the
// connection (a mesh peer), neither a seed.
func (s *Sim) strayConns(age time.Duration) int {
	live := s.Live()
	byID := map[string]*Peer{}
	for _, p := range live {
		byID[string(p.ID())] = p
	}
	n := 0
	for _, p := range live {
		if p.Index < s.cfg.Seeds {
			continue
		}
		for _, c := range p.Host.Network().Conns() {
			q := byID[string(c.RemotePeer())]
			if q == nil || q.Index < s.cfg.Seeds || time.Since(c.Stat().Opened) < age {
				continue
			}
			if p.Host.ConnManager().IsProtected(q.ID(), "") || q.Host.ConnManager().IsProtected(p.ID(), "") {
				continue
			}
			if !p.Service.View().Alive(q.ID()) && !q.Service.View().Alive(p.ID()) {
				n++
			}
		}
	}
	return n
}
