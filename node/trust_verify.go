package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/atomicfile"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/swarm"
	"github.com/llmswarm/llmswarm/verify"
)

// TrustFile, in the data dir, holds this peer's trust ledger: bans,
// verified claims and measured speeds survive a restart.
const TrustFile = "trust.json"

// checkState is this peer's part in keeping claims honest (the ledger
// itself is n.trust, see trust.go): the challenge server answering for
// its own models, the checker vetting peers before they get real work
// (with its reference copies of other peers' layers), and the ledger's
// file.
type checkState struct {
	server  *verify.Server
	checker *verify.Checker // nil: challenges off
	ref     *reference
	ledger  *swarm.Trust
	path    string

	save chan struct{} // a ban to write at once
	// asked is set once this peer originates an MoA query: only then are
	// role peers vetted in the background (a peer that only serves never
	// pays for reference copies of every role model it hears of).
	asked  atomic.Bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool
}

// loadLedger creates the ledger if need be, with the configured ban
// lengths, and loads trust.json into it. It runs before the connection
// gate is built on the ledger.
func (n *Node) loadLedger() error {
	if n.trust == nil {
		n.trust = swarm.NewTrust()
	}
	n.trust.BanFor, n.trust.MaxBan = time.Duration(n.cfg.Trust.Ban), time.Duration(n.cfg.Trust.MaxBan)
	cs := &checkState{ledger: n.trust, path: filepath.Join(n.cfg.DataDir, TrustFile), save: make(chan struct{}, 1)}
	if b, err := os.ReadFile(cs.path); err == nil {
		if err := n.trust.Restore(b); err != nil {
			// A damaged ledger must not keep the peer down: it starts
			// empty, and the file is kept aside for a look.
			n.log.Warn("trust ledger unreadable; starting with an empty one", "file", cs.path, "err", err)
			os.Rename(cs.path, cs.path+".bad")
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("data dir %s: %w", n.cfg.DataDir, err)
	}
	n.trust.OnBan(func(peer.ID) {
		select {
		case cs.save <- struct{}{}:
		default:
		}
	})
	n.checks = cs
	return nil
}

// startChecks serves challenges for this peer's models and builds the
// checker. It runs once the models are loaded.
func (n *Node) startChecks() {
	cs := n.checks
	cs.server = verify.NewServer(n.host, n.verifyLookup, n.log)
	cs.ref = &reference{n: n, h: n.host, ledger: cs.ledger, loaded: map[string]*refModel{}, sem: make(chan struct{}, 1)}
	if n.cfg.Trust.challenges() {
		cs.checker = &verify.Checker{Host: n.host, Trust: cs.ledger, Ref: cs.ref, Log: n.log,
			CheckLayers: n.cfg.Trust.CheckLayers, Tolerance: n.cfg.Trust.Tolerance, Tokens: n.cfg.Trust.Tokens,
			Arch: n.archOf}
	}
}

// wireChecks hands the checker to the originators (they read the ledger
// from the swarm view: swarmOptions) and starts the ledger's saver and
// the background vetting of role peers.
func (n *Node) wireChecks(ctx context.Context) {
	cs := n.checks
	if cs.checker != nil {
		n.originator.Vet = func(ctx context.Context, id peer.ID, c swarm.Claim) error {
			cs.asked.Store(true)
			return cs.checker.Vet(ctx, id, c)
		}
		n.pipeOrig.Vet = cs.checker.Vet
		n.pipeOrig.Referee = cs.referee
	} else if moa.Unverified(n.cfg.MoA.Unverified) != moa.UnverifiedAsk {
		n.log.Warn("trust.challenges is off, so no role peer becomes verified, and moa.unverified is never: " +
			"MoA questions use this peer's own roles and peers verified before only (set moa.unverified to ask to use the others)")
	}
	// Disputes on real traffic are settled from verified weights with or
	// without challenges: a spot-check found them.
	if cs.ref != nil {
		cs.ref.sw = n.swarm
		n.pipeOrig.Verified = cs.ref.settleLayers
	}
	bg, cancel := context.WithCancel(ctx)
	cs.cancel = cancel
	cs.wg.Add(1)
	go func() {
		defer cs.wg.Done()
		cs.saver(bg, n)
	}()
	if cs.checker != nil {
		cs.wg.Add(1)
		go func() {
			defer cs.wg.Done()
			n.vetRoles(bg)
		}()
	}
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
func (cs *checkState) saver(ctx context.Context, n *Node) {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-cs.save:
		case <-tick.C:
		}
		if err := cs.write(); err != nil {
			n.log.Warn("trust ledger not saved", "file", cs.path, "err", err)
		}
	}
}

// write saves the ledger atomically, readable by this user only.
func (cs *checkState) write() error {
	b, err := cs.ledger.MarshalJSON()
	if err != nil {
		return err
	}
	return atomicfile.Write(cs.path, b)
}

// close stops the background work, saves the ledger and frees the
// reference models. It is idempotent.
func (cs *checkState) close() error {
	if cs == nil || cs.closed {
		return nil
	}
	cs.closed = true
	if cs.cancel != nil {
		cs.cancel()
	}
	cs.wg.Wait()
	if cs.server != nil {
		cs.server.Close()
		cs.ref.close()
	}
	return cs.write()
}

// vetRoles challenges, in the background and one at a time, the live role
// peers this peer has not verified, once this peer has originated an MoA
// query (a peer that only serves does not fetch reference copies of every
// role model): an honest newcomer earns its weight without waiting to be
// asked, a liar is banned before it is. Each peer
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
		if !n.checks.asked.Load() {
			t.Reset(roleVetPeriod)
			continue
		}
		now := time.Now()
		for _, p := range n.swarm.View().Peers() {
			if !p.Alive || p.Self || ctx.Err() != nil {
				continue
			}
			for _, r := range p.Cap.Roles {
				claim := swarm.RoleClaim(r.ModelCID)
				if last, ok := tried[p.ID][r.ModelCID]; (ok && now.Sub(last) < roleVetEvery) || n.trust.Verified(p.ID, claim) {
					continue
				}
				if banned, _ := n.trust.Banned(p.ID); banned {
					continue
				}
				if tried[p.ID] == nil {
					if len(tried) >= 4096 {
						clear(tried)
					}
					tried[p.ID] = map[string]time.Time{}
				}
				tried[p.ID][r.ModelCID] = now
				if err := n.checks.checker.Vet(ctx, p.ID, claim); err != nil && ctx.Err() == nil {
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

// referee settles a pipeline spot-check: a fresh challenge of id on claim
// (a peer verified before is checked again: it may lie on real traffic
// and honestly on the challenge it passed). A failed challenge is
// pipeline.ErrCheckFailed (the checker has banned the peer); no reference
// or a refusal to answer decides nothing.
func (cs *checkState) referee(ctx context.Context, id peer.ID, claim swarm.Claim) error {
	_, err := cs.checker.Check(ctx, id, claim)
	var fe *verify.FailError
	if errors.As(err, &fe) || errors.Is(err, verify.ErrBanned) {
		return fmt.Errorf("%w: %v", pipeline.ErrCheckFailed, err)
	}
	return err
}

// archOf is the CPU architecture id's record names ("": none known).
func (n *Node) archOf(id peer.ID) string {
	s := n.Swarm()
	if s == nil {
		return ""
	}
	p, _ := s.View().Get(id)
	return p.Cap.Platform.Arch
}
