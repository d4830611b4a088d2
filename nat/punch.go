package nat

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/protocol/holepunch"
	"github.com/libp2p/go-libp2p/p2p/protocol/identify"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/multiformats/go-multistream"
)

// puncher turns relayed connections into direct ones with DCUtR.
//
// libp2p's own hole punching service only punches connections that open
// after it has learned a public address of this peer, which it polls for
// with a backoff; a peer dialed through a relay in the first quarter
// second after joining (the usual case: its record spreads as soon as it
// has a relay slot) stayed relayed for good. This service punches every
// inbound relayed connection once it can, and tries again while the peer
// is reached only through a relay.
type puncher struct {
	h   host.Host
	ids identify.IDService
	svc *holepunch.Service
	log *slog.Logger

	obs *observedAddrs // our own address as peers see it

	mu      sync.Mutex
	active  map[peer.ID]bool // punches in progress, by peer
	punched map[string]bool  // IDs of direct connections a hole punch made
	wg      sync.WaitGroup
	notifee *network.NotifyBundle
	ctx     context.Context
	cancel  context.CancelFunc
}

const (
	punchRetries    = 3 // DirectConnect calls per relayed connection, each of up to 3 attempts
	punchRetryDelay = 5 * time.Second
	maxReadyWait    = 2 * time.Minute // for a public address of ours, per relayed connection
)

// newPuncher starts hole punching on h; tel traces each punch. sub is
// identify's results on h since it was built (nil: subscribe now, and miss
// the connections already identified); the puncher closes it.
func newPuncher(h host.Host, sub event.Subscription, tel *counters, log *slog.Logger) (*puncher, error) {
	idh, ok := h.(interface{ IDService() identify.IDService })
	if !ok {
		if sub != nil {
			sub.Close()
		}
		return nil, errors.New("hole punching: the libp2p host has no identify service")
	}
	p := &puncher{h: h, ids: idh.IDService(), log: log, obs: newObservedAddrs(), active: map[peer.ID]bool{}, punched: map[string]bool{}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	if sub == nil {
		var err error
		if sub, err = h.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted)); err != nil {
			p.cancel()
			return nil, err
		}
	}
	svc, err := holepunch.NewService(h, p.ids, p.publicAddrs, holepunch.WithTracer(tel))
	if err != nil {
		sub.Close()
		p.cancel()
		return nil, err
	}
	p.svc = svc
	p.wg.Add(1)
	go p.watchIdentify(sub)
	tel.onPunched(p.markPunched, func(rp peer.ID) bool {
		return len(h.Network().ConnsToPeer(rp)) > 0 && !RelayedOnly(h, rp)
	})
	p.notifee = &network.NotifyBundle{ConnectedF: p.connected, DisconnectedF: p.disconnected}
	h.Network().Notify(p.notifee)
	return p, nil
}

// close stops punching and waits for punches in progress.
func (p *puncher) close() {
	p.h.Network().StopNotify(p.notifee)
	p.mu.Lock()
	p.cancel() // under mu: connected starts no punch after this
	p.mu.Unlock()
	p.svc.Close()
	p.wg.Wait()
}

// watchIdentify records the address each identified peer sees us at, when
// it is a public address of one of our listeners.
func (p *puncher) watchIdentify(sub event.Subscription) {
	defer p.wg.Done()
	defer sub.Close()
	for {
		select {
		case <-p.ctx.Done():
			return
		case e, ok := <-sub.Out():
			if !ok {
				return
			}
			ev := e.(event.EvtPeerIdentificationCompleted)
			p.observe(ev.Conn, ev.ObservedAddr)
		}
	}
}

func (p *puncher) observe(c network.Conn, obs ma.Multiaddr) {
	if c == nil || obs == nil || c.Stat().Limited || !manet.IsPublicAddr(obs) {
		return
	}
	if _, err := obs.ValueForProtocol(ma.P_CIRCUIT); err == nil {
		return
	}
	obs = p.punchable(c.LocalMultiaddr(), obs)
	if obs == nil {
		return // an ephemeral port the NAT changed: nobody can reach us there
	}
	ip, err := manet.ToIP(c.RemoteMultiaddr())
	if err != nil {
		return
	}
	observer, ok := netip.AddrFromSlice(ip)
	if !ok {
		return
	}
	p.obs.add(c.ID(), observer, obs, time.Now())
}

// punchable is the public address a punch partner can reach this peer's
// listener at, from obs, the address a peer saw connection local at: obs
// itself when local is one of this peer's listening sockets (same
// transport); when local is an ephemeral port that the NAT kept (obs has
// the same port), obs's IP with the listener's port, as a NAT that keeps
// ports keeps the listener's too (a dial falls back to an ephemeral port
// when the listener's is held by a closing connection to the same peer);
// nil otherwise.
func (p *puncher) punchable(local, obs ma.Multiaddr) ma.Multiaddr {
	shape := codes(local)
	if len(local) < 2 || !slices.Equal(codes(obs), shape) {
		return nil
	}
	kept := local[1].Value() == obs[1].Value()
	for _, l := range p.h.Network().ListenAddresses() {
		if !slices.Equal(codes(l), shape) || l[0].Value() != local[0].Value() && !manet.IsIPUnspecified(l) {
			continue
		}
		if l[1].Value() == local[1].Value() {
			return obs
		}
		if kept {
			out := slices.Clone(obs)
			out[1] = l[1]
			return out
		}
	}
	return nil
}

func codes(m ma.Multiaddr) []int {
	out := make([]int, len(m))
	for i, c := range m {
		out[i] = c.Code()
	}
	return out
}

// publicAddrs are this peer's public direct addresses: announced ones
// (public interfaces, port mappings) and the best observed ones.
func (p *puncher) publicAddrs() []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, a := range p.h.Addrs() {
		if _, err := a.ValueForProtocol(ma.P_CIRCUIT); err != nil && manet.IsPublicAddr(a) {
			out = append(out, a)
		}
	}
	return ma.Unique(append(out, p.obs.best(time.Now())...))
}

// connected starts a punch for an inbound relayed connection: in DCUtR the
// peer that was dialed through the relay initiates.
func (p *puncher) connected(_ network.Network, c network.Conn) {
	if c.Stat().Direction != network.DirInbound {
		return
	}
	if !isRelayed(c) {
		return
	}
	rp := c.RemotePeer()
	p.mu.Lock()
	if p.active[rp] || p.ctx.Err() != nil {
		p.mu.Unlock()
		return
	}
	p.active[rp] = true
	p.wg.Add(1)
	p.mu.Unlock()
	go p.punch(c)
}

// punch waits until this peer knows a public address of its own, then
// punches, again after a pause while the peer is still reached only
// through relays.
func (p *puncher) punch(c network.Conn) {
	rp := c.RemotePeer()
	defer func() {
		p.mu.Lock()
		delete(p.active, rp)
		p.mu.Unlock()
		p.wg.Done()
	}()
	select {
	case <-p.ids.IdentifyWait(c):
	case <-p.ctx.Done():
		return
	}
	unserved := time.Duration(0) // waited for the other side to serve DCUtR
	again := false               // the last call found it not serving yet: no retry delay
	for try := 0; try < punchRetries; try++ {
		if try > 0 && !again && !p.sleep(punchRetryDelay<<(try-1)) {
			return
		}
		again = false
		// libp2p's service answers and punches only once it has seen a
		// public address of ours; until then DirectConnect would block.
		for waited := time.Duration(0); !p.ready(); waited += 250 * time.Millisecond {
			if waited > maxReadyWait || !p.onlyRelayed(rp) || !p.sleep(250*time.Millisecond) {
				return // never public: libp2p's own service punches later connections once it is
			}
		}
		if !p.onlyRelayed(rp) {
			return
		}
		done := make(chan error, 1)
		go func() { done <- p.svc.DirectConnect(rp) }()
		var err error
		select {
		case err = <-done:
		case <-p.ctx.Done():
			return
		}
		switch {
		case err == nil && !p.onlyRelayed(rp):
			return
		case errors.Is(err, multistream.ErrNotSupported[protocol.ID]{}) && unserved < maxReadyWait:
			// The other side serves DCUtR only once it knows a public
			// address of its own (it may have just started behind its
			// NAT): not a failed try; asked again in a second.
			if !p.sleep(time.Second) {
				return
			}
			unserved += time.Second
			try--
			again = true
			continue
		case errors.Is(err, holepunch.ErrHolePunchActive):
			// libp2p's own notifee got there first; see how it ends.
		case err != nil:
			p.log.Debug("nat: hole punch did not connect", "peer", rp, "try", try+1, "err", err)
		}
	}
}

// ready reports whether the hole punching service has started: it
// handles the DCUtR protocol once it knows a public address of ours.
func (p *puncher) ready() bool {
	return slices.Contains(p.h.Mux().Protocols(), holepunch.Protocol)
}

// sleep waits d; false when the puncher closes first.
func (p *puncher) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (p *puncher) onlyRelayed(rp peer.ID) bool { return RelayedOnly(p.h, rp) }

// markPunched remembers rp's direct connections as made by a hole punch,
// and returns how long rp had been reached through a relay only (since
// the oldest relayed connection to it opened).
func (p *puncher) markPunched(rp peer.ID) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var since time.Time
	for _, c := range p.h.Network().ConnsToPeer(rp) {
		if !isRelayed(c) {
			p.punched[c.ID()] = true
		} else if o := c.Stat().Opened; since.IsZero() || o.Before(since) {
			since = o
		}
	}
	if since.IsZero() {
		return 0
	}
	return time.Since(since)
}

// disconnected forgets c; when c was a punched connection and the peer is
// left with relayed ones only (the NAT forgot the mapping, the phone
// changed networks), it punches again.
func (p *puncher) disconnected(_ network.Network, c network.Conn) {
	p.obs.forget(c.ID())
	p.mu.Lock()
	was := p.punched[c.ID()]
	delete(p.punched, c.ID())
	if !was || p.ctx.Err() != nil {
		p.mu.Unlock()
		return
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		rp := c.RemotePeer()
		if !p.onlyRelayed(rp) {
			return
		}
		for _, rc := range p.h.Network().ConnsToPeer(rp) {
			if isRelayed(rc) && rc.Stat().Direction == network.DirInbound {
				p.log.Info("nat: punched connection lost, punching again", "peer", rp)
				p.connected(nil, rc)
				return
			}
		}
	}()
}

// kind is how c reaches its peer: "relayed" (through a circuit relay),
// "punched" (direct, made by a hole punch) or "direct".
func (p *puncher) kind(c network.Conn) string {
	if isRelayed(c) {
		return "relayed"
	}
	if p != nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.punched[c.ID()] {
			return "punched"
		}
	}
	return "direct"
}
