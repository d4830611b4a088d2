package moa

import (
	"bufio"
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/swarm"
)

// secretQ is a question whose prompt must reach no unverified peer.
const secretQ = "What is the capital of France? secret=42"

// checks is a Vet hook standing for the checker against holders that
// cannot pass: a stalled one holds its challenge until the check gives up,
// a missing one has no challenge handler (refused at once, no verdict), an
// unknown one cannot be checked here; the rest pass.
type checks struct {
	trust                   *swarm.Trust
	stall, missing, unknown map[peer.ID]bool
	slow                    map[peer.ID]time.Duration // passes, after this long
	mu                      sync.Mutex
	running                 map[peer.ID]int
	n                       map[peer.ID]int
}

func (c *checks) vet(ctx context.Context, id peer.ID, claim swarm.Claim) error {
	c.mu.Lock()
	if c.n == nil {
		c.n, c.running = map[peer.ID]int{}, map[peer.ID]int{}
	}
	c.n[id]++
	c.running[id]++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running[id]--
		c.mu.Unlock()
	}()
	switch {
	case c.stall[id]:
		<-ctx.Done()
		return ctx.Err()
	case c.missing[id]:
		return errors.New("failed to negotiate protocol: protocols not supported: [/swarm/verify/1.0.0]")
	case c.unknown[id]:
		return nil
	case c.slow[id] > 0:
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.slow[id]):
		}
	}
	c.trust.Pass(id, claim)
	return nil
}

func (c *checks) inFlight(id peer.ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running[id] > 0
}

// TestUnverifiedHoldersGetNoPrompt: beside a verified holder of the
// question's roles, a holder whose challenge stalls and one with no
// challenge handler (both also the only spotters and aggregators, boasting
// 1e6 tok/s) get no prompt, and the questions do not wait for the stalled
// check (it is still running when they have been answered). A role only
// they hold is skipped under UnverifiedNever (the trace says why); under
// UnverifiedAsk it is asked of them, marked unverified, and they are still
// never spotter nor aggregator.
func TestUnverifiedHoldersGetNoPrompt(t *testing.T) {
	origin := newTestPeer(t, 4)
	honest := newTestPeer(t, 4, Reasoner, Concise)
	stall := newTestPeer(t, 4, Reasoner, Concise, Spotter, Aggregator, Critic)
	missing := newTestPeer(t, 4, Reasoner, Concise, Spotter, Aggregator, Critic)
	prompts := map[string]interface{ Load() int32 }{"stalled": countRequests(stall), "missing": countRequests(missing)}
	delivered := func() (n int32) {
		for _, c := range prompts {
			n += c.Load()
		}
		return n
	}
	tr := swarm.NewTrust()
	verifyRoles(tr, honest)
	v := viewTrusting(tr, origin, honest, stall, missing)
	boast(v, stall, 1e6)
	boast(v, missing, 1e6)
	ck := &checks{trust: tr, stall: map[peer.ID]bool{stall.h.ID(): true}, missing: map[peer.ID]bool{missing.h.ID(): true}}
	o := &Originator{Host: origin.h, View: v, Vet: ck.vet}
	t.Cleanup(o.Close)

	for i := range 3 {
		start := time.Now()
		res, err := o.Ask(t.Context(), Query{Prompt: secretQ, MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("question %d answered in %s", i+1, time.Since(start).Round(time.Millisecond))
		for _, a := range res.AgentResponses {
			if a.Peer != honest.h.ID().String() || a.Unverified {
				t.Fatalf("answered by %s (unverified %v), want the verified holder", a.Peer, a.Unverified)
			}
		}
		if res.Classifier != "rules" || !skippedUnverified(res.FailedAgents, Spotter) {
			t.Fatalf("classified by %s, failed agents %+v: want the rules, the spotter listed as not verified", res.Classifier, res.FailedAgents)
		}
		if a := res.Aggregator; a != nil && !errors.Is(a.Err, ErrUnverified) {
			t.Fatalf("aggregator %+v: want it left out as not verified", a)
		}
		if n := delivered(); n != 0 {
			t.Fatalf("after question %d the unverified holders got %d prompts", i+1, n)
		}
	}
	if !ck.inFlight(stall.h.ID()) {
		t.Fatal("the stalled check ended before the questions did: they may have waited for it")
	}

	// A role only they hold: never asked of them by default.
	start := time.Now()
	_, err := o.Direct(t.Context(), Critic, Query{Prompt: secretQ, MaxTokens: 4})
	if !errors.Is(err, ErrNoAgents) || !strings.Contains(err.Error(), "none verified") {
		t.Fatalf("critic held only by unverified peers: %v, want ErrNoAgents saying none is verified", err)
	}
	t.Logf("a role with no verified holder refused in %s", time.Since(start).Round(time.Millisecond))
	if n := delivered(); n != 0 {
		t.Fatalf("the unverified holders got %d prompts under never", n)
	}

	// Under ask: the critic is asked of one of them, marked unverified;
	// the mixture still takes no spotter or aggregator from them.
	o.Unverified = UnverifiedAsk
	res, err := o.Direct(t.Context(), Critic, Query{Prompt: secretQ, MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if a := res.AgentResponses[0]; !a.Unverified || (a.Peer != stall.h.ID().String() && a.Peer != missing.h.ID().String()) {
		t.Fatalf("critic answer %+v: want an unverified holder, marked", a)
	}
	asked := delivered()
	if asked != 1 {
		t.Fatalf("%d prompts for one critic question", asked)
	}
	for range 2 {
		res, err := o.Ask(t.Context(), Query{Prompt: secretQ, MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		if res.Classifier != "rules" || delivered() != asked {
			t.Fatalf("under ask: classified by %s, %d prompts to unverified holders (want the rules, none)", res.Classifier, delivered()-asked)
		}
	}
}

// skippedUnverified reports whether failed lists role as left out for
// want of a verified holder.
func skippedUnverified(failed []answer.Agent, role string) bool {
	for _, a := range failed {
		if a.Role == role && errors.Is(a.Err, ErrUnverified) {
			return true
		}
	}
	return false
}

// sybilLog is what 50 identities on one address received: requests
// decoded from the real wire format, by role, and how many held the
// secret.
type sybilLog struct {
	mu     sync.Mutex
	roles  map[string]int
	secret int
}

func (l *sybilLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.roles {
		n += c
	}
	return n
}

func (l *sybilLog) of(role string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.roles[role]
}

// startSybils starts n hosts on 127.0.0.1 that read each MoA request,
// log it and reset the stream, and makes v see them alive there, each
// claiming every role with model at 1e6 tok/s.
func startSybils(t *testing.T, origin *testPeer, v *swarm.View, n int, model string) ([]peer.ID, *sybilLog) {
	t.Helper()
	log := &sybilLog{roles: map[string]int{}}
	var ids []peer.ID
	var roles []gossip.Role
	for _, r := range Roles {
		roles = append(roles, gossip.Role{Role: r, ModelCID: model, TokPerSec: 1e6})
	}
	for i := range n {
		h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		h.SetStreamHandler(ProtocolID, func(st network.Stream) {
			defer st.Reset()
			req, err := DecodeRequest(bufio.NewReader(st))
			if err != nil {
				return
			}
			log.mu.Lock()
			log.roles[req.Role]++
			for _, m := range req.Messages {
				if strings.Contains(m.Content, "secret=42") {
					log.secret++
				}
			}
			log.mu.Unlock()
		})
		origin.h.Peerstore().AddAddrs(h.ID(), h.Addrs(), time.Hour)
		v.ObserveFrom(&gossip.Capability{PeerID: h.ID().String(), Seq: uint64(i + 1), Roles: roles, Load: gossip.Load{Capacity: 64}},
			time.Now(), netip.MustParseAddr("127.0.0.1"))
		ids = append(ids, h.ID())
	}
	return ids, log
}

// TestSybilsOnOneAddressGetFewPrompts: 50 identities on 127.0.0.1 claim
// every role at 1e6 tok/s and have no challenge handler. Beside a verified
// holder they get no prompt in three questions; under UnverifiedAsk a
// role only they and one unverified newcomer from another network hold is
// asked of at most two of them per question (the per-subnet cap: loopback
// is a network like any other), and the newcomer answers; they are never
// spotter nor aggregator. Before the caps and the policy, three questions
// sent them 254 prompts.
func TestSybilsOnOneAddressGetFewPrompts(t *testing.T) {
	origin := newTestPeer(t, 4)
	honest := newTestPeer(t, 4, Reasoner, Concise)
	newcomer := newTestPeer(t, 4, Critic)
	tr := swarm.NewTrust()
	verifyRoles(tr, honest)
	v := viewTrusting(tr, origin, honest)
	origin.h.Peerstore().AddAddrs(newcomer.h.ID(), newcomer.h.Addrs(), time.Hour)
	v.ObserveFrom(&gossip.Capability{PeerID: newcomer.h.ID().String(), Seq: 1, Roles: newcomer.srv.Roles(), Load: gossip.Load{Capacity: 4}},
		time.Now(), netip.MustParseAddr("192.0.2.7"))
	sybils, log := startSybils(t, origin, v, 50, honest.srv.Roles()[0].ModelCID)
	ck := &checks{trust: tr, missing: map[peer.ID]bool{}, unknown: map[peer.ID]bool{newcomer.h.ID(): true}}
	for _, id := range sybils {
		ck.missing[id] = true
	}
	o := &Originator{Host: origin.h, View: v, Vet: ck.vet}
	t.Cleanup(o.Close)

	for range 3 {
		if _, err := o.Ask(t.Context(), Query{Prompt: secretQ, MaxTokens: 4}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("never, verified holder present: 3 questions sent %d prompts to 50 sybils", log.total())
	if log.total() != 0 {
		t.Fatalf("the sybils got %d prompts (%d with the secret) beside a verified holder", log.total(), log.secret)
	}

	o.Unverified = UnverifiedAsk
	for i := range 3 {
		res, err := o.Direct(t.Context(), Critic, Query{Prompt: secretQ, MaxTokens: 4})
		if err != nil {
			t.Fatal(err)
		}
		if a := res.AgentResponses[0]; a.Peer != newcomer.h.ID().String() || !a.Unverified {
			t.Fatalf("critic answered by %+v, want the unverified newcomer", a)
		}
		if n := log.of(Critic); n > 2*(i+1) {
			t.Fatalf("%d critic prompts to the sybils after %d questions: at most 2 a question", n, i+1)
		}
		if _, err := o.Ask(t.Context(), Query{Prompt: secretQ, MaxTokens: 4}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("ask, a role held only by unverified peers: 3 questions sent %d prompts to 50 sybils (by role %v)", log.total(), log.roles)
	if n := log.total() - log.of(Critic); n != 0 {
		t.Fatalf("the sybils got %d prompts for other roles than the critic (%v)", n, log.roles)
	}
	ck.mu.Lock()
	checked := 0
	for _, id := range sybils {
		checked += ck.n[id]
	}
	ck.mu.Unlock()
	t.Logf("%d challenges of the 50 sybils over 9 questions", checked)
}

// TestAggregatorCheckWaitedFor: the aggregator's only holder is not yet
// verified when the question comes, and its check outlasts the agents'
// answers: the question waits for it (what is left of vetWait) and the
// verified aggregator writes the final answer, rather than a first answer
// in a fresh swarm going out unaggregated. Before, the aggregator was left
// out as not verified.
func TestAggregatorCheckWaitedFor(t *testing.T) {
	origin := newTestPeer(t, 4)
	honest := newTestPeer(t, 4, Reasoner, Concise)
	agg := newTestPeer(t, 4, Aggregator)
	tr := swarm.NewTrust()
	verifyRoles(tr, honest)
	ck := &checks{trust: tr, slow: map[peer.ID]time.Duration{agg.h.ID(): 1500 * time.Millisecond}}
	o := &Originator{Host: origin.h, View: viewTrusting(tr, origin, honest, agg), Vet: ck.vet}
	t.Cleanup(o.Close)
	start := time.Now()
	res, err := o.Ask(t.Context(), Query{Prompt: secretQ, MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.AgentsResponded < 2 || res.Aggregator == nil || res.Aggregator.Error != "" || res.Aggregator.Peer != agg.h.ID().String() {
		t.Fatalf("%d agents, aggregator %+v: want the aggregator verified and asked", res.AgentsResponded, res.Aggregator)
	}
	t.Logf("answered in %s, the aggregator's check taking 1.5 s", time.Since(start).Round(time.Millisecond))
}
