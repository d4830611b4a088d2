package moa

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/swarm"
)

// Unverified is what an originator does with the holders of a role whose
// claim to their role model it has not verified (see trust.go).
type Unverified string

const (
	// UnverifiedNever (the default; "" too): a prompt goes only to
	// verified holders; a role whose holders are all unverified is
	// skipped, and the answer's trace says so.
	UnverifiedNever Unverified = "never"
	// UnverifiedAsk: a role with no verified holder is asked of a few
	// unverified ones (UnverifiedCaps), their answers marked unverified;
	// never as spotter or aggregator (whose word shapes every answer).
	UnverifiedAsk Unverified = "ask"
)

// ErrUnverified: a role was not asked because none of its holders is
// verified (and the policy, or the role, allows no unverified one).
var ErrUnverified = errors.New("moa: no verified holder")

// UnverifiedCaps bound the unverified holders of one role that a
// question takes into consideration: challenged at once in the
// background, and asked under UnverifiedAsk. At most PerRole, and at most
// PerSubnet answering from one /24 (IPv4) or /64 (IPv6), so that a crowd
// of identities on one network gets no more than one honest newcomer
// would. Loopback is a network like any other: tests that run several
// unverified holders of a role on 127.0.0.1 raise PerSubnet themselves.
type UnverifiedCaps struct {
	PerRole   int // default 4; negative: no cap
	PerSubnet int // default 2; negative: no cap
}

// Defaults of UnverifiedCaps.
const (
	DefaultUnverifiedPerRole   = 4
	DefaultUnverifiedPerSubnet = 2
)

func (c UnverifiedCaps) withDefaults() UnverifiedCaps {
	if c.PerRole == 0 {
		c.PerRole = DefaultUnverifiedPerRole
	}
	if c.PerSubnet == 0 {
		c.PerSubnet = DefaultUnverifiedPerSubnet
	}
	return c
}

// How holders are vetted: a question that finds a role with no verified
// holder waits for the checks at most vetWait (less if the checks it
// waits for started earlier: a stalled check delays one question, not
// every one); a background check is given up after vetTimeout, and a
// holder whose check ended without verifying it is not checked again
// for vetRetry.
const (
	vetWait    = 10 * time.Second
	vetTimeout = 30 * time.Second
	vetRetry   = time.Minute
	maxVetted  = 4096 // bound of the memory of checks that did not verify
)

// vetting runs the background checks of role holders: at most one per
// holder and model at a time.
type vetting struct {
	mu      sync.Mutex
	flights map[vetKey]*vetFlight
	failed  map[vetKey]time.Time // ended unverified: not again before vetRetry
	changed chan struct{}        // closed (and replaced) when a check ends
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closed  bool
}

type vetKey struct {
	peer  peer.ID
	model string
}

type vetFlight struct {
	role    string
	net     netip.Prefix
	started time.Time
}

// Close stops the background checks this originator started and waits
// for them. It is idempotent; a question asked after it vets nobody.
func (o *Originator) Close() {
	v := &o.vets
	v.mu.Lock()
	v.closed = true
	if v.cancel != nil {
		v.cancel()
	}
	v.mu.Unlock()
	v.wg.Wait()
}

// startVets challenges, in the background, the unverified holders in
// cands (of role, best first) not being checked already, within the caps
// of checks at once per role and per subnet.
func (o *Originator) startVets(role string, cands []candidate) {
	if o.Vet == nil {
		return
	}
	caps := o.UnverifiedCaps.withDefaults()
	v := &o.vets
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return
	}
	if v.flights == nil {
		v.flights = map[vetKey]*vetFlight{}
		v.failed = map[vetKey]time.Time{}
		v.changed = make(chan struct{})
		v.ctx, v.cancel = context.WithCancel(context.Background())
	}
	perRole, perNet := 0, map[netip.Prefix]int{}
	for _, f := range v.flights {
		if f.role == role {
			perRole++
			perNet[f.net]++
		}
	}
	now := time.Now()
	for _, c := range cands {
		if c.verified {
			continue
		}
		k := vetKey{c.peer.ID, c.role.ModelCID}
		if _, ok := v.flights[k]; ok {
			continue
		}
		if at, ok := v.failed[k]; ok && now.Sub(at) < vetRetry {
			continue
		}
		net := swarm.Subnet(c.peer.Addr)
		if (caps.PerRole >= 0 && perRole >= caps.PerRole) || (caps.PerSubnet >= 0 && perNet[net] >= caps.PerSubnet) {
			continue
		}
		perRole++
		perNet[net]++
		v.flights[k] = &vetFlight{role: role, net: net, started: now}
		v.wg.Add(1)
		go o.vetOne(k, swarm.RoleClaim(c.role.ModelCID))
	}
}

// vetOne runs one background check.
func (o *Originator) vetOne(k vetKey, claim swarm.Claim) {
	v := &o.vets
	defer v.wg.Done()
	ctx, cancel := context.WithTimeout(v.ctx, vetTimeout)
	err := o.Vet(ctx, k.peer, claim)
	cancel()
	tr := o.View.Trust()
	verified := err == nil && tr != nil && tr.Verified(k.peer, claim)
	if !verified && v.ctx.Err() == nil {
		o.log().Debug("role peer not verified; it gets no prompt while unverified", "peer", k.peer, "model", claim.Model, "err", err)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.flights, k)
	if !verified {
		if len(v.failed) >= maxVetted {
			clear(v.failed)
		}
		v.failed[k] = time.Now()
	}
	close(v.changed)
	v.changed = make(chan struct{})
}

// waitVets is until when a question waits for the checks of cands (its
// holders of one role) that are running, and the channel closed when one
// ends; ok false when there is nothing worth waiting for: no check of
// them running that started less than vetWait ago.
func (o *Originator) waitVets(cands []candidate, asked time.Time) (until time.Time, changed <-chan struct{}, ok bool) {
	v := &o.vets
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range cands {
		f, running := v.flights[vetKey{c.peer.ID, c.role.ModelCID}]
		if !running {
			continue
		}
		if end := f.started.Add(vetWait); end.After(until) {
			until = end
		}
	}
	if end := asked.Add(vetWait); end.Before(until) {
		until = end
	}
	if !time.Now().Before(until) {
		return until, nil, false
	}
	return until, v.changed, true
}

// usable is what a question may ask of cands (holders of role, best
// first). The unverified ones are challenged in the background (see
// startVets) and take no prompt while a verified holder exists. When none
// is verified, a question that may wait (wait: any role but the spotter) waits a
// little for the checks running (waitVets): until the best holder is
// verified, or none better than those verified is still being checked.
// If nobody is verified by then: under UnverifiedAsk and for an answering
// role, the unverified holders the caps allow; else none, with an error
// matching ErrUnverified that says why.
func (o *Originator) usable(ctx context.Context, role string, cands []candidate, wait bool) ([]candidate, error) {
	asked := time.Now()
	o.startVets(role, cands)
	if verified := onlyVerified(cands); len(verified) > 0 {
		return verified, nil // no wait at all: the checks run on their own
	}
	for wait && len(cands) > 0 {
		until, changed, ok := o.waitVets(pending(cands), asked)
		if ok {
			t := time.NewTimer(time.Until(until))
			select {
			case <-ctx.Done():
			case <-changed:
			case <-t.C:
			}
			t.Stop()
		}
		// Weighed again: a check may have ended since they were weighed.
		cands = o.reweigh(cands)
		if !ok || ctx.Err() != nil || len(pending(cands)) == 0 {
			break
		}
		o.startVets(role, cands)
	}
	if verified := onlyVerified(cands); len(verified) > 0 {
		return verified, nil
	}
	if len(cands) == 0 {
		return nil, nil
	}
	switch {
	case role == Spotter || role == Aggregator:
		return nil, fmt.Errorf("%w: %d holder(s) of %s, none verified by this peer (an unverified peer is never %s)", ErrUnverified, len(cands), role, role)
	case o.Unverified != UnverifiedAsk:
		return nil, fmt.Errorf("%w: %d holder(s) of %s, none verified by this peer yet (moa.unverified is never)", ErrUnverified, len(cands), role)
	}
	return o.capUnverified(cands), nil
}

// pending are the unverified holders in cands (best first) worth waiting
// for: all of them while none is verified, else those that, verified,
// would outweigh the best verified one.
func pending(cands []candidate) []candidate {
	best := 0.0
	for _, c := range cands {
		if c.verified && c.weight > best {
			best = c.weight
		}
	}
	var out []candidate
	for _, c := range cands {
		if !c.verified && (best == 0 || c.weight/unverifiedFactor > best) {
			out = append(out, c)
		}
	}
	return out
}

// onlyVerified is the verified holders in cands.
func onlyVerified(cands []candidate) []candidate {
	var out []candidate
	for _, c := range cands {
		if c.verified {
			out = append(out, c)
		}
	}
	return out
}

// reweigh weighs cands again (a check may have verified or banned some),
// best first.
func (o *Originator) reweigh(cands []candidate) []candidate {
	var out []candidate
	for _, c := range cands {
		if !c.peer.Self && !o.View.Routable(c.peer.ID) {
			continue
		}
		o.weigh(&c)
		out = append(out, c)
	}
	slices.SortStableFunc(out, heavierFirst)
	return out
}

// capUnverified is the unverified holders in cands (best first) that the
// caps let one question ask.
func (o *Originator) capUnverified(cands []candidate) []candidate {
	caps := o.UnverifiedCaps.withDefaults()
	perNet := map[netip.Prefix]int{}
	var out []candidate
	for _, c := range cands {
		if caps.PerRole >= 0 && len(out) >= caps.PerRole {
			break
		}
		net := swarm.Subnet(c.peer.Addr)
		if caps.PerSubnet >= 0 && perNet[net] >= caps.PerSubnet {
			continue
		}
		perNet[net]++
		out = append(out, c)
	}
	return out
}
