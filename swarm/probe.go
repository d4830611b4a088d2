package swarm

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	lpswarm "github.com/libp2p/go-libp2p/p2p/net/swarm"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/multiformats/go-multistream"

	"github.com/llmswarm/llmswarm/gossip"
)

// Probing a peer heard of only through others' relays.
const (
	maxCandidates = 512
	probeWorkers  = 8
	probeTimeout  = 5 * time.Second // dial and ping
	probeBackoff  = time.Second     // after the first failure (±50%); doubles
	maxBackoff    = 30 * time.Second
	maxTries      = 8                // failed probes before a lead is dropped
	leadTTL       = 10 * time.Minute // a lead not heard again for this long is dropped
)

// prober confirms peers that this peer heard of only through records
// relayed by others: such a record says nothing about whether its author
// is alive now (anyone who kept an old record can replay it to a peer
// that never saw it), so the author is dialled and asked for its own
// record (pinged where it does not serve the record exchange), and it is
// alive in the view only once it answers, with what it says of itself now
// (a lead may predate a change this peer was not there to receive). It
// does not depend on anyone's
// clock. Probes run at most probeWorkers at a time, newest candidates
// (fewest failed tries) first, each retried with backoff while its
// records keep coming.
type prober struct {
	h     host.Host
	view  *View
	log   *slog.Logger
	lease func() time.Duration // how long an answer keeps a peer alive
	// ask asks a peer for its own current record (the record exchange),
	// which puts it in the view alive with what it says now, not with
	// what a lead said of it; nil: leads are pinged.
	ask func(ctx context.Context, id peer.ID) error

	mu    sync.Mutex
	cands map[peer.ID]*candidate
	wake  chan struct{}
}

type candidate struct {
	rec    gossip.Capability // the newest record heard
	sealed []byte            // as its peer signed it
	heard  time.Time         // when it was heard
	tries  int               // failed probes
	next   time.Time         // earliest next probe
	busy   bool
}

func newProber(h host.Host, v *View, log *slog.Logger) *prober {
	return &prober{h: h, view: v, log: log, cands: map[peer.ID]*candidate{}, wake: make(chan struct{}, 1),
		lease: func() time.Duration { return 0 }}
}

// heard notes a relayed record of id, a peer not alive in the view.
func (p *prober) heard(id peer.ID, c *gossip.Capability, sealed []byte, now time.Time) {
	p.mu.Lock()
	cd, ok := p.cands[id]
	switch {
	case ok:
		if c.Seq > cd.rec.Seq {
			if !slices.Equal(c.Addrs, cd.rec.Addrs) && !cd.busy {
				// New addresses (a relay slot it just got, say) are worth
				// a probe now rather than after the backoff.
				cd.next = now
			}
			cd.rec, cd.sealed, cd.heard = *c, sealed, now
		}
	case len(p.cands) >= maxCandidates && !p.dropOneLocked():
		p.mu.Unlock()
		return
	default:
		p.cands[id] = &candidate{rec: *c, sealed: sealed, heard: now, next: now}
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// dropOneLocked makes room: it drops the idle candidate that failed most
// (the oldest heard among equals).
func (p *prober) dropOneLocked() bool {
	var victim peer.ID
	var worst *candidate
	for id, cd := range p.cands {
		if cd.busy {
			continue
		}
		if worst == nil || cd.tries > worst.tries || (cd.tries == worst.tries && cd.heard.Before(worst.heard)) {
			victim, worst = id, cd
		}
	}
	if worst == nil {
		return false
	}
	delete(p.cands, victim)
	return true
}

// pending is how many peers wait for a probe.
func (p *prober) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.cands)
}

// run schedules probes until ctx ends.
func (p *prober) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	done := make(chan struct{}, probeWorkers)
	running := 0
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		due, wait := p.due(now, probeWorkers-running)
		for _, id := range due {
			running++
			wg.Add(1)
			go func() {
				defer wg.Done()
				p.probe(ctx, id)
				done <- struct{}{}
			}()
		}
		if wait <= 0 || wait > time.Second {
			wait = time.Second // also drops silent candidates
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-done:
			running--
		case <-timer.C:
		}
	}
}

// due marks up to n candidates busy and returns them, fewest failed tries
// first, and how long until the next one is due. Candidates that failed
// maxTries probes, or were not heard of for leadTTL, are dropped: nothing
// says they live (records are published only when they change, so a
// lead is not heard again every heartbeat).
func (p *prober) due(now time.Time, n int) ([]peer.ID, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ready []peer.ID
	var wait time.Duration
	for id, cd := range p.cands {
		if cd.busy {
			continue
		}
		if cd.tries >= maxTries || now.Sub(cd.heard) > leadTTL {
			delete(p.cands, id)
			continue
		}
		if d := cd.next.Sub(now); d > 0 {
			if wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		ready = append(ready, id)
	}
	slices.SortFunc(ready, func(a, b peer.ID) int { return p.cands[a].tries - p.cands[b].tries })
	if len(ready) > n {
		if wait == 0 {
			wait = time.Millisecond // more are due as soon as a worker frees
		}
		ready = ready[:max(n, 0)]
	}
	for _, id := range ready {
		p.cands[id].busy = true
	}
	return ready, wait
}

// probe asks id for its record (or pings it): if it answers, it is alive
// in the view with the record it gave (or, pinged, the newest heard of
// it). A peer the table would not take now (View.Room: its bound of
// neighbours is reached) is dropped unasked; one that does not answer,
// or that the table does not admit, is tried again later, backing off.
func (p *prober) probe(ctx context.Context, id peer.ID) {
	p.mu.Lock()
	rec := p.cands[id].rec // busy: never dropped meanwhile
	p.mu.Unlock()
	if !p.view.Room(id, &rec, time.Now()) {
		// The table filled since it was heard of: it would not be taken.
		p.mu.Lock()
		delete(p.cands, id)
		p.mu.Unlock()
		return
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	asked, err := p.reach(pctx, id)
	cancel()
	if err == nil && !asked {
		p.mu.Lock()
		rec, sealed := p.cands[id].rec, p.cands[id].sealed // busy: never dropped meanwhile
		p.mu.Unlock()
		// It answered now: alive now, for as long as any peer that answers.
		p.view.observe(&rec, sealed, time.Now(), remoteAddr(p.h, id), p.lease())
	}
	if p.view.Alive(id) {
		// It answered, here or to another question of this peer's (the
		// record exchange a new connection sets off).
		p.mu.Lock()
		delete(p.cands, id)
		p.mu.Unlock()
		return
	}
	if err != nil && ctx.Err() == nil {
		p.log.Debug("peer heard of through others does not answer", "peer", id, "err", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	cd := p.cands[id]
	cd.busy = false
	cd.tries++
	back := probeBackoff
	for i := 1; i < cd.tries && back < maxBackoff; i++ {
		back *= 2
	}
	// Jittered: two peers probing each other at once would otherwise dial
	// at once again (a TCP simultaneous open, which the handshake fails).
	back = min(back, maxBackoff)
	cd.next = time.Now().Add(back/2 + rand.N(back))
}

// reach asks id for its own record, or pings it when it does not serve
// the record exchange (or p has no ask); asked says it gave its record.
func (p *prober) reach(ctx context.Context, id peer.ID) (asked bool, err error) {
	var ask func(context.Context) error
	if p.ask != nil {
		ask = func(ctx context.Context) error { return p.ask(ctx, id) }
	}
	return askOrPing(ctx, p.h, id, ask)
}

// askOrPing puts a question to id through ask (the record exchange), or
// pings it when it does not serve the exchange (or ask is nil); asked says
// ask was answered. libp2p remembers a failed dial for seconds (two peers
// that found each other on the LAN and dialled at once fail that way),
// which says nothing about the peer now: then it dials directly, past that.
func askOrPing(ctx context.Context, h host.Host, id peer.ID, ask func(context.Context) error) (asked bool, err error) {
	once := func(ctx context.Context) (bool, error) {
		if ask != nil {
			err := ask(ctx)
			if !errors.Is(err, multistream.ErrNotSupported[protocol.ID]{}) {
				return err == nil, err
			}
		}
		return false, Ping(ctx, h, id)
	}
	asked, err = once(ctx)
	if err != nil && errors.Is(err, lpswarm.ErrDialBackoff) {
		asked, err = once(network.WithForceDirectDial(ctx, "liveness probe"))
	}
	return asked, err
}

// remoteAddr is the IP address of this peer's connection to id (zero
// when there is none, or it goes through a relay).
func remoteAddr(h host.Host, id peer.ID) netip.Addr {
	for _, c := range h.Network().ConnsToPeer(id) {
		if c.Stat().Limited {
			continue
		}
		ip, err := manet.ToIP(c.RemoteMultiaddr())
		if err != nil {
			continue
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}
