package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
	"github.com/llmswarm/llmswarm/verify"
)

// TrustFile, in the data dir, holds this peer's trust ledger: bans,
// verified claims and measured speeds survive a restart.
const TrustFile = "trust.json"

// trustState is this peer's part in keeping claims honest: its ledger,
// the challenge server answering for its own models, and the checker
// (with its reference copies of other peers' layers) vetting peers before
// they get real work.
type trustState struct {
	ledger  *swarm.Trust
	server  *verify.Server
	checker *verify.Checker // nil: challenges off
	ref     *reference
	path    string

	save   chan struct{} // a ban to write at once
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool
}

// startTrust loads the ledger and serves challenges for this peer's
// models. It runs after the models are loaded and before the originators
// are built.
func (n *Node) startTrust() error {
	ts := &trustState{ledger: swarm.NewTrust(), path: filepath.Join(n.cfg.DataDir, TrustFile), save: make(chan struct{}, 1)}
	ts.ledger.BanFor, ts.ledger.MaxBan = time.Duration(n.cfg.Trust.Ban), time.Duration(n.cfg.Trust.MaxBan)
	if b, err := os.ReadFile(ts.path); err == nil {
		if err := ts.ledger.Restore(b); err != nil {
			// A damaged ledger must not keep the peer down: it starts
			// empty, and the file is kept aside for a look.
			n.log.Warn("trust ledger unreadable; starting with an empty one", "file", ts.path, "err", err)
			os.Rename(ts.path, ts.path+".bad")
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("data dir %s: %w", n.cfg.DataDir, err)
	}
	ts.ledger.OnBan(func(peer.ID) {
		select {
		case ts.save <- struct{}{}:
		default:
		}
	})
	ts.server = verify.NewServer(n.host, n.verifyLookup, n.log)
	ts.ref = &reference{n: n, ledger: ts.ledger, loaded: map[string]*refModel{}, sem: make(chan struct{}, 1)}
	if n.cfg.Trust.challenges() {
		ts.checker = &verify.Checker{Host: n.host, Trust: ts.ledger, Ref: ts.ref, Log: n.log,
			CheckLayers: n.cfg.Trust.CheckLayers, Tolerance: n.cfg.Trust.Tolerance, Tokens: n.cfg.Trust.Tokens}
	}
	n.trust = ts
	return nil
}

// wireTrust hands the ledger and the checker to the originators and
// starts the ledger's saver and the background vetting of role peers.
func (n *Node) wireTrust(ctx context.Context) {
	ts := n.trust
	n.originator.Trust, n.pipeOrig.Trust = ts.ledger, ts.ledger
	if ts.checker != nil {
		n.originator.Vet, n.pipeOrig.Vet = ts.checker.Vet, ts.checker.Vet
	}
	bg, cancel := context.WithCancel(ctx)
	ts.cancel = cancel
	ts.wg.Add(1)
	go func() {
		defer ts.wg.Done()
		ts.saver(bg, n)
	}()
	if ts.checker != nil {
		ts.wg.Add(1)
		go func() {
			defer ts.wg.Done()
			n.vetRoles(bg)
		}()
	}
}

// Trust is this peer's trust ledger (nil before Start).
func (n *Node) Trust() *swarm.Trust {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.trust == nil {
		return nil
	}
	return n.trust.ledger
}

// verifyLookup finds the loaded model answering a challenge for layers
// [a,b) of model: a stage shard serving them, or a role model.
func (n *Node) verifyLookup(model string, a, b int) *engine.Model {
	if p := n.pipe; p != nil {
		for _, sh := range p.stages.Local() {
			if sh.ModelCID == model && sh.Start <= a && b <= sh.End {
				return sh.Model
			}
		}
	}
	if n.moaServer != nil {
		if m := n.moaServer.ModelOf(model); m != nil && b <= m.Info().Layers {
			return m
		}
	}
	return nil
}

// saver writes the ledger at once after a ban, and every minute.
func (ts *trustState) saver(ctx context.Context, n *Node) {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ts.save:
		case <-tick.C:
		}
		if err := ts.write(); err != nil {
			n.log.Warn("trust ledger not saved", "file", ts.path, "err", err)
		}
	}
}

// write saves the ledger atomically, readable by this user only.
func (ts *trustState) write() error {
	b, err := ts.ledger.MarshalJSON()
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(ts.path), ".trust-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), ts.path)
}

// close stops the background work, saves the ledger and frees the
// reference models. It is idempotent.
func (ts *trustState) close() error {
	if ts == nil || ts.closed {
		return nil
	}
	ts.closed = true
	if ts.cancel != nil {
		ts.cancel()
	}
	ts.wg.Wait()
	ts.server.Close()
	ts.ref.close()
	return ts.write()
}

// vetRoles challenges, in the background and one at a time, the live role
// peers this peer has not verified: an honest newcomer earns its weight
// without waiting to be asked, a liar is banned before it is. Each peer
// and model is tried at most once per roleVetEvery.
func (n *Node) vetRoles(ctx context.Context) {
	tried := map[peer.ID]map[string]time.Time{}
	t := time.NewTimer(roleVetStart)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		for _, p := range n.swarm.View().Peers() {
			if !p.Alive || p.Self || ctx.Err() != nil {
				continue
			}
			for _, r := range p.Cap.Roles {
				claim := swarm.RoleClaim(r.ModelCID)
				if last, ok := tried[p.ID][r.ModelCID]; (ok && now.Sub(last) < roleVetEvery) || n.trust.ledger.Verified(p.ID, claim) {
					continue
				}
				if banned, _ := n.trust.ledger.Banned(p.ID); banned {
					continue
				}
				if tried[p.ID] == nil {
					if len(tried) >= 4096 {
						clear(tried)
					}
					tried[p.ID] = map[string]time.Time{}
				}
				tried[p.ID][r.ModelCID] = now
				if err := n.trust.checker.Vet(ctx, p.ID, claim); err != nil && ctx.Err() == nil {
					n.log.Debug("trust: role peer not verified", "peer", p.ID, "model", r.ModelCID, "err", err)
				}
			}
		}
		t.Reset(roleVetPeriod)
	}
}

// When role peers are vetted in the background: the first round a little
// after start (the swarm view fills first), then every roleVetPeriod; a
// peer and model once per roleVetEvery at most.
const (
	roleVetStart  = 5 * time.Second
	roleVetPeriod = 15 * time.Second
	roleVetEvery  = 10 * time.Minute
)
