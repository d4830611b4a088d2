package swarm

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// Probing the peers of the table (see Liveness).
const (
	usedWindow    = 2 * time.Minute  // a peer in use within it is probed every Heartbeat
	minProbeGap   = 30 * time.Second // a live peer not in use is probed at most this often
	deadProbeGap  = 2 * time.Minute  // and a dead one (it may come back) at most this often
	keepWorkers   = 16
	budgetTimeout = 5 * time.Second // a probe of a peer not in use
	// A peer new in the table is checked once this long after: a change
	// it published while this peer was not yet in its gossip mesh (the
	// first seconds after they met) reaches this peer no other way before
	// the budget's round.
	recheckAfter = 5 * time.Second
)

// IdleDeadAfter is how long an answer keeps alive a peer not in use in a
// table of idle such peers: two rounds of the probe budget (a round is
// idle/ProbeRate, at least 30 s between probes of one peer), so a peer the
// budget reaches late is not swept meanwhile, and Misses probe timeouts.
// It is also the bound on noticing that such a peer died, left or was cut
// off by a partition: within IdleDeadAfter of its last answer, and a tick
// of the sweep (Heartbeat/4), it is dead. A peer whose last connection
// closes is probed at once and is dead sooner (Misses probe timeouts).
func (l Liveness) IdleDeadAfter(idle int) time.Duration {
	l = l.withDefaults()
	round := max(minProbeGap, time.Duration(float64(idle)/l.ProbeRate*float64(time.Second)))
	return 2*round + time.Duration(l.Misses)*budgetTimeout
}

// keeper decides who is alive by probing: the peers in use every
// Heartbeat (dead after Misses failed probes in a row, so within
// Misses×Heartbeat), the other peers of the table on a budget of
// ProbeRate probes a second whatever its size, oldest answer first, and
// any peer at once when its last connection closes (a killed process
// closes its connections at once). A probe that is answered is the
// peer's answer to this one, so it makes the peer alive with the record
// the table holds; records relayed by others never do.
type keeper struct {
	h    host.Host
	view *View
	log  *slog.Logger
	live Liveness

	mu     sync.Mutex
	st     map[peer.ID]*probeState
	tokens float64
	last   time.Time     // the last schedule
	lease  time.Duration // what an answer keeps a peer alive for
	kick   chan peer.ID
	wake   chan struct{} // a probe of a peer in use, or a retry, is due

	bannedAlive []peer.ID // banned peers the last schedule found alive

	// check asks a peer whether its record is newer than the sequence
	// number the table holds, taking a newer one (the record exchange);
	// the probes of peers not in use are checks, so a change whose
	// record did not reach this peer is caught within a round of the
	// budget, without records refreshed to the whole swarm. nil: pings.
	check func(ctx context.Context, id peer.ID, have uint64) error
}

type probeState struct {
	misses   int       // failed probes in a row
	next     time.Time // the next probe of a peer in use, or the retry after a miss
	probed   time.Time // the last probe's end
	lastUsed time.Time
	recheck  time.Time // when a peer new in the table is checked (zero: done)
	busy     bool
	kicked   bool // its last connection closed: probe now
}

func newKeeper(h host.Host, v *View, log *slog.Logger) *keeper {
	return &keeper{h: h, view: v, log: log, live: v.live, st: map[peer.ID]*probeState{},
		kick: make(chan peer.ID, 256), wake: make(chan struct{}, 1), lease: v.live.IdleDeadAfter(0)}
}

// Disconnected implements network.Notifiee: a peer whose last connection
// closed is probed at once.
func (k *keeper) disconnected(id peer.ID) {
	if len(k.h.Network().ConnsToPeer(id)) > 0 {
		return
	}
	select {
	case k.kick <- id:
	default:
	}
}

type probeJob struct {
	id      peer.ID
	timeout time.Duration
	check   bool // a check of the peer's record (a peer not in use), not a ping
}

func (k *keeper) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	every := min(max(k.live.Heartbeat/4, 20*time.Millisecond), 250*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	done := make(chan struct{}, keepWorkers)
	running := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-k.wake:
		case id := <-k.kick:
			k.mu.Lock()
			st := k.st[id]
			if st == nil {
				st = &probeState{}
				k.st[id] = st
			}
			st.kicked = true
			k.mu.Unlock()
		case <-done:
			running--
			continue
		}
		jobs, banned := k.schedule(time.Now(), keepWorkers-running)
		for _, id := range banned {
			if k.view.markDead(id, time.Now()) {
				k.log.Info("peer dead", "peer", id, "why", "banned")
			}
		}
		for _, j := range jobs {
			running++
			wg.Add(1)
			go func() {
				defer wg.Done()
				k.probe(ctx, j)
				done <- struct{}{}
			}()
		}
	}
}

// schedule returns up to n probes due at now and marks their peers busy,
// and the banned peers still alive in the view.
func (k *keeper) schedule(now time.Time, n int) ([]probeJob, []peer.ID) {
	rows := k.view.rows()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.bannedAlive = k.bannedAlive[:0]
	if !k.last.IsZero() {
		k.tokens = min(k.tokens+k.live.ProbeRate*now.Sub(k.last).Seconds(), max(1, k.live.ProbeRate))
	}
	k.last = now
	seen := make(map[peer.ID]bool, len(rows))
	usedTimeout := max(k.live.Heartbeat*4/5, 50*time.Millisecond)
	var due []probeJob
	var budget []Peer
	idle := 0
	for _, p := range rows {
		seen[p.ID] = true
		st := k.st[p.ID]
		if st == nil {
			st = &probeState{recheck: now.Add(recheckAfter)}
			k.st[p.ID] = st
		}
		if k.view.opts.inUse != nil && k.view.opts.inUse(p.ID) {
			st.lastUsed = now
		}
		used := !st.lastUsed.IsZero() && now.Sub(st.lastUsed) < usedWindow
		if !used {
			idle++
		}
		if st.busy {
			continue
		}
		if banned, _ := k.bannedLocked(p.ID); banned {
			// This peer will not hear it: it is dead here (and is not
			// probed, its connections refused), whatever it says.
			if p.Alive {
				k.bannedAlive = append(k.bannedAlive, p.ID)
			}
			continue
		}
		timeout := budgetTimeout
		if used {
			timeout = usedTimeout
		}
		switch {
		case st.kicked && p.Alive, st.misses > 0 && p.Alive && !now.Before(st.next):
			due = append(due, probeJob{p.ID, timeout, !used})
		case used && !now.Before(st.next):
			due = append(due, probeJob{p.ID, timeout, false})
		case p.Alive && !st.recheck.IsZero() && !now.Before(st.recheck) && k.check != nil:
			due = append(due, probeJob{p.ID, budgetTimeout, true})
		case !used && p.Alive && now.Sub(later(st.probed, p.LastSeen)) >= minProbeGap,
			!used && !p.Alive && now.Sub(later(st.probed, p.DeadSince)) >= deadProbeGap:
			budget = append(budget, p)
		}
	}
	for id := range k.st {
		if !seen[id] && !k.st[id].busy {
			delete(k.st, id)
		}
	}
	k.lease = k.live.IdleDeadAfter(idle)
	// The most overdue first: a live peer is due minProbeGap after its
	// last answer or probe, a dead one deadProbeGap after. (Live peers
	// first, as before, starved the dead whenever the budget was short of
	// the table, past 15 peers: one that came back was never probed.)
	dueAt := func(p Peer) time.Time {
		if p.Alive {
			return later(k.st[p.ID].probed, p.LastSeen).Add(minProbeGap)
		}
		return later(k.st[p.ID].probed, p.DeadSince).Add(deadProbeGap)
	}
	slices.SortFunc(budget, func(a, b Peer) int { return dueAt(a).Compare(dueAt(b)) })
	for _, p := range budget {
		if k.tokens < 1 {
			break
		}
		k.tokens--
		due = append(due, probeJob{p.ID, budgetTimeout, true})
	}
	if len(due) > n {
		due = due[:max(n, 0)]
	}
	for _, j := range due {
		st := k.st[j.id]
		st.busy, st.kicked = true, false
		if j.check {
			st.recheck = time.Time{}
		}
	}
	return due, slices.Clone(k.bannedAlive)
}

func (k *keeper) bannedLocked(id peer.ID) (bool, string) {
	if t := k.view.opts.trust; t != nil {
		return t.Banned(id)
	}
	return false, ""
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// probe pings j.id, or checks its record (see keeper.check): an answer
// makes it alive (with the record the table holds, or the newer one it
// gave) for the lease; Misses failures in a row make it dead.
func (k *keeper) probe(ctx context.Context, j probeJob) {
	pctx, cancel := context.WithTimeout(ctx, j.timeout)
	var check func(context.Context) error
	if j.check && k.check != nil {
		var have uint64
		if p, ok := k.view.Get(j.id); ok {
			have = p.Cap.Seq
		}
		check = func(ctx context.Context) error { return k.check(ctx, j.id, have) }
	}
	_, err := askOrPing(pctx, k.h, j.id, check)
	cancel()
	now := time.Now()
	k.mu.Lock()
	lease := k.lease
	k.mu.Unlock()
	if err == nil {
		if p, ok := k.view.Get(j.id); ok {
			k.view.observe(&p.Cap, p.sealed, now, remoteAddr(k.h, j.id), lease)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.st[j.id]
	if st == nil {
		return
	}
	st.busy = false
	st.probed = now
	st.next = now.Add(k.live.Heartbeat)
	if !j.check {
		// A peer in use is probed when its next probe is due, not at the
		// schedule's next tick after it (a tick late, twice, was the worst
		// case of noticing a crash on a route: 3.1 s, now 2.7 s with a 1 s
		// heartbeat).
		k.wakeAt(k.live.Heartbeat)
	}
	switch {
	case err == nil:
		st.misses = 0
	case ctx.Err() != nil:
	default:
		st.misses++
		if st.misses < k.live.Misses {
			st.next = now.Add(k.live.Heartbeat / 10) // retry at once: a dead peer in use is noticed within Misses probes
			k.wakeAt(k.live.Heartbeat / 10)
			return
		}
		st.misses = 0
		if k.view.markDead(j.id, now) {
			k.log.Info("peer dead", "peer", j.id, "failed_probes", k.live.Misses, "err", err)
		}
	}
}

// wakeAt has the keeper schedule again after d.
func (k *keeper) wakeAt(d time.Duration) {
	time.AfterFunc(d, func() {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	})
}

// notifiee tells the keeper and the record exchange about connections.
type notifiee struct {
	connected    func(peer.ID)
	disconnected func(peer.ID)
}

func (n notifiee) Listen(network.Network, ma.Multiaddr)      {}
func (n notifiee) ListenClose(network.Network, ma.Multiaddr) {}
func (n notifiee) Connected(_ network.Network, c network.Conn) {
	n.connected(c.RemotePeer())
}
func (n notifiee) Disconnected(_ network.Network, c network.Conn) {
	n.disconnected(c.RemotePeer())
}

// currentLease is how long an answer keeps a peer alive now.
func (k *keeper) currentLease() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}
