package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/swarm"
)

// drafter is the local draft model of pipeline.draft, loaded at its first
// use and kept until the peer stops; each speculating generation drafts in
// a session of its own.
type drafter struct {
	path string
	opts engine.Options

	mu     sync.Mutex
	m      *engine.Model
	err    error // the load's, kept: a file that failed once is not read again
	closed bool
}

// draft is pipeline.Originator.Drafter.
func (d *drafter) draft(_ context.Context, _ pipeline.ModelRef, tok *engine.Tokenizer, s engine.Sampling) (engine.SpecModel, func(), error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, nil, errors.New("pipeline.draft: the peer is stopping")
	}
	if d.m == nil && d.err == nil {
		// Not the request's context: a query cancelled during the load
		// must not leave the peer without its draft.
		d.m, d.err = engine.Load(context.Background(), d.path, d.opts)
		if d.err != nil {
			d.err = fmt.Errorf("pipeline.draft: %w", d.err)
		}
	}
	m, err := d.m, d.err
	d.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	if fp := m.Tokenizer().Fingerprint(); fp != tok.Fingerprint() {
		return nil, nil, fmt.Errorf("pipeline.draft %s has another tokenizer (%d tokens, fingerprint %s) than the model asked for (%d, %s)",
			d.path, m.Tokenizer().VocabSize(), fp, tok.VocabSize(), tok.Fingerprint())
	}
	sess, err := m.NewSession()
	if err != nil {
		return nil, nil, err
	}
	return engine.SessionDraft(sess, s.Options()), sess.Close, nil
}

func (d *drafter) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if d.m != nil {
		d.m.Close()
		d.m = nil
	}
}

// swarmDraft is pipeline.Originator.Drafter with pipeline.draft_swarm: a
// draft session on a drafter role of the swarm whose tokenizer is the
// model's, over /swarm/draft/1.0.0 (this peer's own drafter without the
// network), the nearest first. Its proposals are greedy and taken as
// certain (a peer's distribution is never trusted); the pipeline's cost
// model weighs its round trip.
func (n *Node) swarmDraft(ctx context.Context, _ pipeline.ModelRef, tok *engine.Tokenizer, s engine.Sampling) (engine.SpecModel, func(), error) {
	fp := tok.Fingerprint()
	var holders []swarm.RoleHolder
	for _, h := range n.swarm.View().ByRole(moa.Drafter) {
		if h.Role.Vocab == fp && (h.Peer.Self || h.Peer.Cap.TakesWork()) {
			holders = append(holders, h)
		}
	}
	rtt := func(h swarm.RoleHolder) time.Duration {
		if h.Peer.Self {
			return 0
		}
		if d := n.host.Peerstore().LatencyEWMA(h.Peer.ID); d > 0 {
			return d
		}
		return time.Hour // not measured: after those that are
	}
	slices.SortStableFunc(holders, func(a, b swarm.RoleHolder) int { return cmp.Compare(rtt(a), rtt(b)) })
	var errs []error
	for _, h := range holders {
		if h.Peer.Self {
			d, closeDraft, err := n.moaServer.LocalDraft(fp, s.RepeatPenalty)
			if err == nil {
				return d, closeDraft, nil
			}
			errs = append(errs, err)
			continue
		}
		d, err := moa.DialDraft(ctx, n.host, peer.AddrInfo{ID: h.Peer.ID}, moa.DraftOpen{Vocab: fp, RepeatPenalty: s.RepeatPenalty},
			tok.VocabSize(), 0)
		if err == nil {
			return d, func() { d.Close(); d.Acknowledge(n.ledger.Ack) }, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", h.Peer.ID, err))
	}
	if len(errs) == 0 {
		return nil, nil, errors.New("pipeline.draft_swarm: no live drafter with this model's tokenizer")
	}
	return nil, nil, fmt.Errorf("pipeline.draft_swarm: %w", errors.Join(errs...))
}
