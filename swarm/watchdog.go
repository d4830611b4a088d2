package swarm

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Progress sets how calls to other peers notice that a peer hung. A call
// (a pipeline step, an MoA answer) expects progress within
// max(Floor, Multiplier × the time the peer was measured to need). When none
// comes, the peers the call depends on are pinged: one that refuses is
// gone, one that does not answer within ProbeTimeout, nor when pinged again
// within twice that, is hung (SIGSTOP, a frozen phone, a dead link), and
// the call is ended so that the caller can move on. A peer that answers is
// alive and merely slow, and the call goes on, probed again every Floor, so
// a slow device is never cut off for being slow. A call with no progress for
// max(MaxStall, 20 × expected) although every peer answers pings is ended
// too (a live process whose work is stuck).
type Progress struct {
	Floor        time.Duration // default 750 ms
	Multiplier   float64       // default 4
	ProbeTimeout time.Duration // default 500 ms
	MaxStall     time.Duration // default 2 min
}

// Defaults fills in the zero fields.
func (p Progress) Defaults() Progress {
	if p.Floor <= 0 {
		p.Floor = 750 * time.Millisecond
	}
	if p.Multiplier <= 0 {
		p.Multiplier = 4
	}
	if p.ProbeTimeout <= 0 {
		p.ProbeTimeout = 500 * time.Millisecond
	}
	if p.MaxStall <= 0 {
		p.MaxStall = 2 * time.Minute
	}
	return p
}

// Deadline is how long a call expected to take `expected` may go without
// progress before its peers are probed.
func (p Progress) Deadline(expected time.Duration) time.Duration {
	p = p.Defaults()
	return max(p.Floor, time.Duration(p.Multiplier*float64(expected)))
}

// ErrStalled is a call that made no progress for the stall limit although
// its peers answered pings.
var ErrStalled = errors.New("swarm: no progress although the peer answers pings")

// Watch guards one call. Progress re-arms it; Stop ends it.
type Watch struct {
	p      Progress
	h      host.Host
	peers  []peer.ID
	onHung func(peer.ID, error)

	mu       sync.Mutex
	expected time.Duration
	last     time.Time // last progress
	hung     peer.ID
	cause    error
	detect   time.Duration // from the last progress to the verdict
	kick     chan struct{}
	done     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
}

// Watch starts guarding a call that depends on peers (the ones to probe;
// this peer itself is never probed) and is expected to make progress
// within expected. onHung runs once, from the watch's goroutine, with the
// peer found hung (or the first peer with ErrStalled); it must end the call
// (e.g. reset its stream).
func (p Progress) Watch(h host.Host, expected time.Duration, peers []peer.ID, onHung func(peer.ID, error)) *Watch {
	w := &Watch{p: p.Defaults(), h: h, onHung: onHung, expected: expected, last: time.Now(),
		kick: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	for _, id := range peers {
		if h != nil && id != h.ID() { // without a host there is nothing to probe with
			w.peers = append(w.peers, id)
		}
	}
	go w.run()
	return w
}

// Progress records progress and sets what the next step is expected to
// take.
func (w *Watch) Progress(expected time.Duration) {
	w.mu.Lock()
	w.last, w.expected = time.Now(), expected
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Stop ends the watch and reports the peer found hung, if any, with the
// cause and how long the call had gone without progress when it was
// found.
func (w *Watch) Stop() (hung peer.ID, cause error, detect time.Duration) {
	w.stopOnce.Do(func() { close(w.done) })
	<-w.stopped
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hung, w.cause, w.detect
}

func (w *Watch) run() {
	defer close(w.stopped)
	if len(w.peers) == 0 {
		<-w.done
		return
	}
	w.mu.Lock()
	first := w.p.Deadline(w.expected)
	w.mu.Unlock()
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-w.kick:
			w.mu.Lock()
			d := w.p.Deadline(w.expected)
			w.mu.Unlock()
			t.Reset(d)
			continue
		case <-t.C:
		}
		w.mu.Lock()
		since, expected := time.Since(w.last), w.expected
		w.mu.Unlock()
		id, err := w.probe()
		if err == nil && since > max(w.p.MaxStall, 20*expected) {
			id, err = w.peers[0], ErrStalled
		}
		if err != nil {
			w.mu.Lock()
			w.hung, w.cause, w.detect = id, err, time.Since(w.last)
			w.mu.Unlock()
			w.onHung(id, err)
			<-w.done
			return
		}
		t.Reset(w.p.Floor)
	}
}

// probe pings every peer at once and returns the first that fails. A
// peer that refuses or cannot be reached fails at once; one silent for
// ProbeTimeout is pinged once more, for twice as long, and fails only if
// it stays silent: a pong late because this machine or the peer's was
// overloaded for a moment is no hang (under two test suites at once, pongs
// 0.5-1.3 s late called live peers hung), while a frozen peer stays silent
// (found after Floor + 3 × ProbeTimeout: 2.25 s by default).
func (w *Watch) probe() (peer.ID, error) {
	first, silent := w.pingAll(w.peers, w.p.ProbeTimeout)
	if first.err != nil || len(silent) == 0 {
		return first.id, first.err
	}
	again, late := w.pingAll(silent, 2*w.p.ProbeTimeout)
	if again.err == nil && len(late) > 0 {
		return late[0], ErrNoPong
	}
	return again.id, again.err
}

type verdict struct {
	id  peer.ID
	err error
}

// pingAll pings peers at once within timeout: the first that failed
// otherwise than by silence, and those that were silent.
func (w *Watch) pingAll(peers []peer.ID, timeout time.Duration) (first verdict, silent []peer.ID) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := make(chan verdict, len(peers))
	for _, id := range peers {
		go func() { out <- verdict{id, Ping(ctx, w.h, id)} }()
	}
	for range peers {
		v := <-out
		switch {
		case v.err == nil, errors.Is(v.err, network.ErrResourceLimitExceeded):
			// This peer's own stream limits refusing the ping say nothing
			// of the other peer.
		case errors.Is(v.err, ErrNoPong):
			silent = append(silent, v.id)
		case first.err == nil:
			first = v
		}
	}
	return first, silent
}

// ErrNoPong is a peer that did not answer a ping in time.
var ErrNoPong = errors.New("swarm: no answer to ping")
