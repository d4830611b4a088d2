package node_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
	"github.com/llmswarm/llmswarm/verify"
)

// secretPrompt must reach no role peer this peer has not verified.
const secretPrompt = "What is the capital of France? secret=42"

// promptLog is what rogue role peers received: MoA requests read in the
// real wire format, by role, and how many carried the secret.
type promptLog struct {
	mu     sync.Mutex
	roles  map[string]int
	secret int
}

func (l *promptLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.roles {
		n += c
	}
	return n
}

func (l *promptLog) of(role string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.roles[role]
}

func (l *promptLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.roles)
}

// rogue is a role peer of the adversary: a host with the real gossip
// router announcing every role of model at 1e6 tok/s, that logs each MoA
// request it gets and resets it, and whose challenge handler is missing
// ("missing") or reads the challenge and never answers ("stall").
type rogue struct {
	h    host.Host
	kind string
}

func startRogues(t *testing.T, listen []string, kind, model string, log *promptLog, origins ...*nodetest.Peer) []*rogue {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out []*rogue
	var routers []*gossip.Router
	for _, l := range listen {
		h, k := newTestHost(t, l)
		h.SetStreamHandler(moa.ProtocolID, func(st network.Stream) {
			defer st.Reset()
			req, err := moa.DecodeRequest(bufio.NewReader(st))
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
		if kind == "stall" {
			h.SetStreamHandler(verify.ProtocolID, func(st network.Stream) {
				verify.ReadRequest(bufio.NewReader(st)) // and never answer
				<-ctx.Done()
				st.Reset()
			})
		}
		r, err := gossip.NewRouter(ctx, h, k, nil, gossip.WithHeartbeat(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		routers = append(routers, r)
		for _, o := range origins {
			connectTo(t, o.Host(), h) // the origin dials: it sees their address
		}
		out = append(out, &rogue{h: h, kind: kind})
	}
	var roles []gossip.Role
	for _, r := range moa.Roles {
		roles = append(roles, gossip.Role{Role: r, ModelCID: model, TokPerSec: 1e6})
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := uint64(1); ctx.Err() == nil; seq++ {
			for i, r := range out {
				routers[i].PublishCapability(ctx, &gossip.Capability{PeerID: r.h.ID().String(), Seq: seq, Roles: roles, Load: gossip.Load{Capacity: 64}})
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, r := range routers {
			r.Close()
		}
	})
	return out
}

func rogueIDs(rs []*rogue) []peer.ID {
	var ids []peer.ID
	for _, r := range rs {
		ids = append(ids, r.h.ID())
	}
	return ids
}

// TestMoAUnverifiedRolePeersGetNoPrompt: beside an honest reasoner and
// concise peer, two rogues claim every role of the same model at 1e6
// tok/s, one with no challenge handler, one whose challenge stalls; they
// are the only spotters, aggregators and critics. With the honest peer
// verified, questions reach only it (the rogues get no prompt and the
// questions take no longer for them); a role only the rogues hold is not
// asked under moa.unverified never (the answer fails as no agents, naming
// why); under ask it is asked of them, and they are still never spotter
// nor aggregator.
func TestMoAUnverifiedRolePeersGetNoPrompt(t *testing.T) {
	model := tinyModel(t)
	_, _, cid, err := shards.BuildManifest(model)
	if err != nil {
		t.Fatal(err)
	}
	origin := nodetest.Start(t, nodetest.Config(t.TempDir()))
	acfg := nodetest.Config(t.TempDir())
	acfg.MoA.Unverified = "ask"
	acfg.Bootstrap = []string{origin.Addr(t)}
	askOrigin := nodetest.Start(t, acfg)
	hcfg := nodetest.Config(t.TempDir())
	hcfg.Bootstrap = []string{origin.Addr(t)}
	hcfg.Engine = node.EngineConfig{Threads: 1, Context: 512}
	hcfg.Roles = map[string]string{moa.Reasoner: model, moa.Concise: model}
	honest := nodetest.Start(t, hcfg)
	log := &promptLog{roles: map[string]int{}}
	rogues := append(startRogues(t, []string{"/ip4/127.0.0.1/tcp/0"}, "missing", cid.String(), log, origin, askOrigin),
		startRogues(t, []string{"/ip4/127.0.0.1/tcp/0"}, "stall", cid.String(), log, origin, askOrigin)...)
	ids := append(rogueIDs(rogues), honest.ID())
	for _, o := range []*nodetest.Peer{origin, askOrigin} {
		nodetest.Eventually(t, 20*time.Second, "the origins see the honest peer and the rogues' roles", func() bool {
			return nodetest.SeesAlive(o, ids...) && len(o.Swarm().View().ByRole(moa.Reasoner)) == 3 &&
				len(o.Swarm().View().ByRole(moa.Spotter)) == 2
		})
	}
	claim := swarm.RoleClaim(cid.String())
	ask := func(o *nodetest.Peer, mode string) (*answer.Result, time.Duration, error) {
		start := time.Now()
		res, err := client.New(o.APIAddr(), "").Query(t.Context(), client.QueryRequest{Query: secretPrompt, Mode: mode, MaxTokens: 4}, nil)
		return res, time.Since(start), err
	}
	// The first question has the honest peer checked (in the background,
	// while it waits a little for a verified holder).
	for _, o := range []*nodetest.Peer{origin, askOrigin} {
		ask(o, "moa")
		nodetest.Eventually(t, 60*time.Second, "the honest peer verified", func() bool { return o.Trust().Verified(honest.ID(), claim) })
	}
	if n := log.total(); n != 0 {
		t.Fatalf("the rogues got %d prompts (%d with the secret) while being checked", n, log.secret)
	}

	for i := range 3 {
		res, took, err := ask(origin, "moa")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("never: question %d answered in %s, classified by %s", i+1, took.Round(time.Millisecond), res.Classifier)
		for _, a := range res.AgentResponses {
			if a.Peer != honest.ID().String() || a.Unverified {
				t.Fatalf("answered by %s (unverified %v), want the verified honest peer", a.Peer, a.Unverified)
			}
		}
		if n := log.total(); n != 0 {
			t.Fatalf("after question %d the rogues got %d prompts (%d with the secret; by role %s)", i+1, n, log.secret, log)
		}
	}
	for _, r := range rogues {
		if banned, _ := origin.Trust().Banned(r.h.ID()); banned || origin.Trust().Verified(r.h.ID(), claim) {
			t.Fatalf("%s rogue: banned %v, verified %v; want neither (no verdict)", r.kind, banned, origin.Trust().Verified(r.h.ID(), claim))
		}
	}

	// A role only the rogues hold.
	_, took, err := ask(origin, moa.Critic)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "none verified") {
		t.Fatalf("critic held only by unverified rogues: %v, want 503 (no agents), saying none is verified", err)
	}
	t.Logf("never: a role held only by unverified peers refused in %s", took.Round(time.Millisecond))
	if n := log.total(); n != 0 {
		t.Fatalf("the rogues got %d prompts under never", n)
	}

	// Under ask: the critic is asked of them; spotter and aggregator never.
	for range 2 {
		res, took, err := ask(askOrigin, "moa")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("ask: question answered in %s, classified by %s", took.Round(time.Millisecond), res.Classifier)
	}
	ask(askOrigin, moa.Critic) // the rogues reset: it fails, after asking them
	t.Logf("ask: prompts to the rogues by role: %s", log)
	if log.of(moa.Spotter) != 0 || log.of(moa.Aggregator) != 0 || log.of(moa.Critic) == 0 || log.total() != log.of(moa.Critic) {
		t.Fatalf("under ask the rogues got prompts by role %s: want the critic's only", log)
	}
}

// TestMoASybilsOnOneAddress: 50 identities on 127.0.0.1 claim every role
// of the honest peer's model at 1e6 tok/s; half have no challenge
// handler, half stall it. The honest reasoner and concise peer answers
// from another address. Three questions send the sybils no prompt
// (before: 254 in the field, all with the prompt). Under moa.unverified
// ask, a role only they hold is asked of at most two of them a question
// (loopback is a /24 like any other), and never the spotter's or the
// aggregator's.
func TestMoASybilsOnOneAddress(t *testing.T) {
	model := tinyModel(t)
	_, _, cid, err := shards.BuildManifest(model)
	if err != nil {
		t.Fatal(err)
	}
	// Fifty identities on one address are graylisted by gossip scoring,
	// loopback included; the origins exempt loopback, so that the sybils
	// reach the MoA caps this test is about.
	loopbackOK := node.GossipConfig{IPColocationWhitelist: []string{"127.0.0.0/8"}}
	ocfg := nodetest.Config(t.TempDir())
	ocfg.Gossip = loopbackOK
	origin := nodetest.Start(t, ocfg)
	acfg := nodetest.Config(t.TempDir())
	acfg.Gossip = loopbackOK
	acfg.MoA.Unverified = "ask"
	acfg.Bootstrap = []string{origin.Addr(t)}
	askOrigin := nodetest.Start(t, acfg)
	hcfg := nodetest.Config(t.TempDir())
	hcfg.Listen = []string{"/ip4/127.0.9.1/tcp/0"}
	hcfg.Bootstrap = []string{origin.Addr(t)}
	hcfg.Engine = node.EngineConfig{Threads: 1, Context: 512}
	hcfg.Roles = map[string]string{moa.Reasoner: model, moa.Concise: model}
	honest := nodetest.Start(t, hcfg)
	log := &promptLog{roles: map[string]int{}}
	listen := make([]string, 25)
	for i := range listen {
		listen[i] = "/ip4/127.0.0.1/tcp/0"
	}
	sybils := append(startRogues(t, listen, "missing", cid.String(), log, origin, askOrigin),
		startRogues(t, listen, "stall", cid.String(), log, origin, askOrigin)...)
	ids := append(rogueIDs(sybils), honest.ID())
	for _, o := range []*nodetest.Peer{origin, askOrigin} {
		nodetest.Eventually(t, 30*time.Second, "the origins see the honest peer and the 50 sybils alive", func() bool {
			return nodetest.SeesAlive(o, ids...) && len(o.Swarm().View().ByRole(moa.Reasoner)) == 51
		})
	}
	claim := swarm.RoleClaim(cid.String())
	ask := func(o *nodetest.Peer, mode string) (*answer.Result, error) {
		return client.New(o.APIAddr(), "").Query(t.Context(), client.QueryRequest{Query: secretPrompt, Mode: mode, MaxTokens: 4}, nil)
	}
	// The never origin first, alone: what the sybils get is its doing.
	ask(origin, "moa")
	nodetest.Eventually(t, 60*time.Second, "the honest peer verified", func() bool { return origin.Trust().Verified(honest.ID(), claim) })
	for range 3 {
		if _, err := ask(origin, "moa"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("never, a verified holder present: %d prompts to the 50 sybils in 4 questions", log.total())
	if n := log.total(); n != 0 {
		t.Fatalf("the sybils got %d prompts (%d with the secret; by role %s)", n, log.secret, log)
	}
	// The ask origin's first question may find the honest peer not yet
	// verified (a loaded machine) and ask sybils within the caps: counted
	// apart from what follows.
	ask(askOrigin, "moa")
	nodetest.Eventually(t, 60*time.Second, "the honest peer verified by the ask origin", func() bool {
		return askOrigin.Trust().Verified(honest.ID(), claim)
	})
	t.Logf("ask: the first question, before the honest peer was verified: prompts by role %s", log)
	log.mu.Lock()
	log.roles, log.secret = map[string]int{}, 0
	log.mu.Unlock()

	for i := range 3 {
		ask(askOrigin, moa.Critic) // the sybils reset: it fails, after asking some
		if n := log.of(moa.Critic); n > 2*(i+1) {
			t.Fatalf("%d critic prompts to the sybils after %d questions: at most 2 a question", n, i+1)
		}
		if _, err := ask(askOrigin, "moa"); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("ask: %d prompts to the 50 sybils in 3 critic and 4 mixture questions (by role %s)", log.total(), log)
	if log.total() != log.of(moa.Critic) {
		t.Fatalf("under ask the sybils got prompts by role %s: want the critic's only", log)
	}
}
