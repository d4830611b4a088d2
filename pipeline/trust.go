package pipeline

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/swarm"
)

// Routing uses earned claims: a peer's announced MsPerLayer may make it
// look slower, never faster, until this peer measured it (a challenge, or
// real hops); a peer banned in the ledger (the View's, View.Trust) is
// never routed through (swarm.View.Routable); a peer about to get its
// first real hop is vetted first.

func (o *Originator) vetTimeout() time.Duration {
	if o.VetTimeout > 0 {
		return o.VetTimeout
	}
	return 30 * time.Second
}

// msPerLayer is what a layer of model on peer id is priced at: what this
// peer measured of it, else DefaultMsPerLayer; what the peer announces
// counts only where it is slower. This peer's own shards measured
// themselves.
func (o *Originator) msPerLayer(id peer.ID, model string, announced float64) float64 {
	if o.Host != nil && id == o.Host.ID() {
		return announced
	}
	if !validMs(announced) {
		return announced // AssembleRoute ignores the holder
	}
	if tr := o.View.Trust(); tr != nil {
		if v, ok := tr.Speed(id, swarm.MsPerLayerKey(model)); ok {
			return max(v, announced)
		}
	}
	return max(announced, DefaultMsPerLayer)
}

// routeHolders are the holders of ref's shape that take work, priced: a
// peer on battery costs more (gossip's PowerFactor), so routes prefer
// peers on power.
func (o *Originator) routeHolders(ref ModelRef, holders []swarm.ShardHolder) []Holder {
	var hs []Holder
	for _, h := range holders {
		if h.Shard.Layers != ref.Layers || h.Shard.Hidden != ref.Hidden {
			continue
		}
		self := o.Host != nil && h.Peer.ID == o.Host.ID()
		if !self && !h.Peer.Cap.TakesWork() {
			continue // it would refuse the session (battery low, or hot)
		}
		rtt := 0.0
		if o.RTT != nil && h.Peer.ID != o.Host.ID() {
			rtt = float64(o.RTT(h.Peer.ID).Microseconds()) / 1000
		}
		ms := o.msPerLayer(h.Peer.ID, ref.CID, h.Shard.MsPerLayer)
		if validMs(ms) {
			ms /= h.Peer.Cap.PowerFactor()
		}
		hs = append(hs, Holder{Peer: h.Peer.ID.String(), Start: h.Shard.Start, End: h.Shard.End,
			MsPerLayer: ms, RTTms: rtt})
	}
	return hs
}

// planCtx assembles the cheapest live route, then vets the peers on it
// that have no verified claim yet (all at once); a peer that does not pass
// is left out and the route planned again, until a route's peers all pass
// or no route is left.
//
// All the vetting of one plan shares VetTimeout (default 30 s): peers
// that do not answer their challenge in time are left out like those that
// fail it (without a ban: they may be slow), so identities that accept a
// challenge and never answer cost a query at most that long. When it is
// spent, the route is planned over peers already verified alone.
func (o *Originator) planCtx(ctx context.Context, ref ModelRef, holders []swarm.ShardHolder, failed map[string]time.Time) ([]Hop, error) {
	if o.View != nil {
		// Peers found hung that answer pings again rejoin later routes.
		o.View.RecheckHung(o.Host, o.Progress.Defaults().ProbeTimeout)
	}
	hs := o.routeHolders(ref, holders)
	ex := o.excluded(failed)
	refused := map[string]error{}
	exclude := func(p string) bool { return refused[p] != nil || ex(p) }
	vctx, cancel := context.WithTimeout(ctx, o.vetTimeout())
	defer cancel()
	for {
		r, err := AssembleRoute(ref.Layers, ref.Shape.Ends, hs, exclude)
		if err != nil {
			if idle := notTakingWork(ref, holders, o.Host); idle != "" {
				err = fmt.Errorf("%w (%s)", err, idle)
			}
			if len(refused) > 0 {
				return nil, fmt.Errorf("%w (left out after their checks: %s)", err, reasons(refused))
			}
			return nil, err
		}
		if vctx.Err() != nil && ctx.Err() == nil {
			// Out of vetting time: only what is verified already.
			return o.verifiedRoute(ref, hs, holders, exclude, refused)
		}
		bad := o.vet(vctx, ref, r.Hops, holders)
		if len(bad) == 0 {
			return r.Hops, nil
		}
		for p, err := range bad {
			refused[p] = err
			o.log().Warn("pipeline: peer left out of the route: its check did not pass", "peer", p, "model", ref.CID, "err", err)
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("pipeline: vetting the route's peers: %w", err)
		}
	}
}

// verifiedRoute plans over the peers whose claims this peer has verified
// (and this peer itself).
func (o *Originator) verifiedRoute(ref ModelRef, hs []Holder, holders []swarm.ShardHolder, exclude func(string) bool, refused map[string]error) ([]Hop, error) {
	self := o.Host.ID().String()
	r, err := AssembleRoute(ref.Layers, ref.Shape.Ends, hs, func(p string) bool {
		if exclude(p) {
			return true
		}
		if p == self || o.Vet == nil {
			return false
		}
		id, err := peer.Decode(p)
		tr := o.View.Trust()
		if err != nil || tr == nil {
			return true
		}
		for _, h := range holders {
			if h.Peer.ID == id && tr.Verified(id, swarm.Claim{Model: ref.CID, Start: h.Shard.Start, End: h.Shard.End}) {
				return false
			}
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("pipeline: the route's peers could not be checked within %s and verified peers alone do not cover the model: %w (left out: %s)",
			o.vetTimeout(), err, reasons(refused))
	}
	return r.Hops, nil
}

// vet runs Vet, at once, for every peer of hops without a verified claim
// to the shard its hop runs on. It returns the peers that did not pass.
func (o *Originator) vet(ctx context.Context, ref ModelRef, hops []Hop, holders []swarm.ShardHolder) map[string]error {
	if o.Vet == nil {
		return nil
	}
	type job struct {
		id    peer.ID
		claim swarm.Claim
	}
	var jobs []job
	tr := o.View.Trust()
	for _, h := range hops {
		id, err := peer.Decode(h.Peer)
		if err != nil || id == o.Host.ID() {
			continue
		}
		c, ok := shardClaim(ref, id, h, holders)
		if !ok || (tr != nil && tr.Verified(id, c)) || slices.Contains(jobs, job{id, c}) {
			continue
		}
		jobs = append(jobs, job{id, c})
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	bad := map[string]error{}
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := o.Vet(ctx, j.id, j.claim); err != nil {
				mu.Lock()
				bad[j.id.String()] = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return bad
}

// shardClaim is the claim of the narrowest shard peer id announces that
// holds hop h: a check of it is good for every hop within that shard.
func shardClaim(ref ModelRef, id peer.ID, h Hop, holders []swarm.ShardHolder) (swarm.Claim, bool) {
	var best swarm.Claim
	ok := false
	for _, sh := range holders {
		s := sh.Shard
		if sh.Peer.ID != id || s.ModelCID != ref.CID || s.Start > h.Start || h.End > s.End {
			continue
		}
		if !ok || s.End-s.Start < best.End-best.Start {
			best, ok = swarm.Claim{Model: ref.CID, Start: s.Start, End: s.End}, true
		}
	}
	return best, ok
}

func reasons(m map[string]error) string {
	var out []string
	for p, err := range m {
		out = append(out, short(p)+": "+err.Error())
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

// notTakingWork names the holders of ref's layers left out of routes
// because they take no new work, and why their records say so.
func notTakingWork(ref ModelRef, holders []swarm.ShardHolder, self host.Host) string {
	var out []string
	for _, h := range holders {
		if h.Shard.Layers != ref.Layers || h.Shard.Hidden != ref.Hidden || h.Peer.Cap.TakesWork() ||
			(self != nil && h.Peer.ID == self.ID()) {
			continue
		}
		var why []string
		if b := h.Peer.Cap.Battery; b != nil && !b.Charging {
			why = append(why, fmt.Sprintf("battery %d%%, not charging", b.Percent))
		}
		if t := h.Peer.Cap.Thermal; t != "" && t != gossip.ThermalNominal {
			why = append(why, "thermal "+t)
		}
		note := fmt.Sprintf("%s holds [%d,%d) but takes no new work", short(h.Peer.ID.String()), h.Shard.Start, h.Shard.End)
		if len(why) > 0 {
			note += ": " + strings.Join(why, ", ")
		}
		out = append(out, note)
	}
	return strings.Join(out, "; ")
}
