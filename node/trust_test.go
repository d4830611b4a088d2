package node_test

import (
	"bufio"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/verify"
)

// liarPeer is an attacker with a valid key: its own, honestly signed
// capability record claims every layer of a model at 0.001 ms per layer
// and its reasoner role at 1e6 tok/s. It answers challenges on the real
// wire format, lying as its kind says, and counts the real work it is
// sent (stage sessions, MoA questions).
type liarPeer struct {
	h                      host.Host
	kind                   string // random, scaled, nan, not_held
	m                      *engine.Model
	stage, moa, challenges atomic.Int32
}

func startLiar(t *testing.T, boot *nodetest.Peer, kind, model string, m *engine.Model) *liarPeer {
	t.Helper()
	key, _, _ := crypto.GenerateEd25519Key(nil)
	h, err := libp2p.New(libp2p.Identity(key), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), nodetest.Member())
	if err != nil {
		t.Fatal(err)
	}
	lp := &liarPeer{h: h, kind: kind, m: m}
	h.SetStreamHandler(pipeline.ProtocolID, func(st network.Stream) { lp.stage.Add(1); st.Reset() })
	h.SetStreamHandler(moa.ProtocolID, func(st network.Stream) { lp.moa.Add(1); st.Reset() })
	h.SetStreamHandler(verify.ProtocolID, lp.answer)
	ctx, cancel := context.WithCancel(context.Background())
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithFloodPublish(true))
	if err != nil {
		t.Fatal(err)
	}
	topic, err := ps.Join(gossip.CapsTopic)
	if err != nil {
		t.Fatal(err)
	}
	ai, _ := peer.AddrInfoFromString(boot.Addr(t))
	if err := h.Connect(ctx, *ai); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, a := range h.Addrs() {
		addrs = append(addrs, a.String())
	}
	in := m.Info()
	done := make(chan struct{})
	go func() { // heartbeats, as a live peer sends them
		defer close(done)
		for ctx.Err() == nil {
			c := &gossip.Capability{PeerID: h.ID().String(), Seq: uint64(time.Now().UnixNano()), TimeMS: time.Now().UnixMilli(),
				Addrs: addrs, Load: gossip.Load{Capacity: 64},
				Shards: []gossip.Shard{{ModelCID: model, Start: 0, End: in.Layers, Layers: in.Layers, Hidden: in.Hidden, MsPerLayer: 0.001}},
				Roles:  []gossip.Role{{Role: moa.Reasoner, ModelCID: model, TokPerSec: 1e6}}}
			if b, err := gossip.SealCapability(c, key); err == nil {
				topic.Publish(ctx, b)
			}
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		topic.Close()
		h.Close()
	})
	return lp
}

// answer lies: the real trace scaled by 1.01, random numbers of the
// right sizes, or the real trace with a NaN; or it refuses layers it
// claims.
func (lp *liarPeer) answer(st network.Stream) {
	defer st.Close()
	lp.challenges.Add(1)
	req, err := verify.ReadRequest(bufio.NewReader(st))
	if err != nil {
		verify.WriteError(st, verify.CodeBadRequest, err.Error())
		return
	}
	if lp.kind == "not_held" {
		verify.WriteError(st, verify.CodeNotHeld, "not here after all")
		return
	}
	s, err := lp.m.AcquireSession(context.Background())
	if err != nil {
		verify.WriteError(st, verify.CodeBusy, err.Error())
		return
	}
	defer s.Close()
	in := req.Hidden
	for l := req.Start; l < req.End; l++ {
		s.Truncate(0)
		var out []float32
		if l == 0 {
			out, err = s.RunRange(context.Background(), 0, 1, req.Tokens, nil)
		} else {
			out, err = s.RunRange(context.Background(), l, l+1, nil, in)
		}
		if err != nil {
			return
		}
		in = slices.Clone(out)
		switch lp.kind {
		case "scaled":
			for i := range out {
				out[i] *= 1.01
			}
		case "random":
			for i := range out {
				out[i] = float32(rand.NormFloat64())
			}
		case "nan":
			if l == req.End-1 {
				out[len(out)-1] = float32(math.NaN())
			}
		}
		if verify.WriteBoundary(st, l, out) != nil {
			return
		}
	}
}

// TestLiarGetsNoTraffic: peers with valid keys whose records claim every
// layer and the reasoner role at absurd speeds, and whose challenge
// answers are scaled, random, hold a NaN, or refuse the layers claimed
// as not held, are each challenged before their first real work and get
// no stage session and no MoA question; those that answered wrong are
// banned, the refuser only left out (an honest peer restarting says the
// same); honest peers, checked against slices this peer fetched, carry the
// answer and the pipeline. The bans survive the originator's restart.
func TestLiarGetsNoTraffic(t *testing.T) {
	model := tinyModel(t)
	_, _, cid, err := shards.BuildManifest(model) // a model is named by its root
	if err != nil {
		t.Fatal(err)
	}
	m, err := engine.Load(context.Background(), model, engine.Options{Threads: 1, Slots: 4, Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	origin := nodetest.Start(t, nodetest.Config(t.TempDir()))
	boot := origin.Addr(t)
	start := func(edit func(*node.Config)) *nodetest.Peer {
		cfg := nodetest.Config(t.TempDir())
		cfg.Bootstrap = []string{boot}
		cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
		edit(&cfg)
		return nodetest.Start(t, cfg)
	}
	a := start(func(c *node.Config) { c.Shards = []string{model + ":0-2"} })
	b := start(func(c *node.Config) { c.Shards = []string{model + ":2-4"} })
	r := start(func(c *node.Config) { c.Roles = map[string]string{moa.Reasoner: model} })
	var liars []*liarPeer
	ids := []peer.ID{a.ID(), b.ID(), r.ID()}
	for _, kind := range []string{"scaled", "random", "nan", "not_held"} {
		lp := startLiar(t, origin, kind, cid.String(), m)
		liars = append(liars, lp)
		ids = append(ids, lp.h.ID())
	}
	nodetest.Eventually(t, 15*time.Second, "origin sees every peer and the liars' claims", func() bool {
		return nodetest.SeesAlive(origin, ids...) && nodetest.SeesShards(origin, a.ID(), b.ID()) &&
			len(origin.Swarm().View().ByRole(moa.Reasoner)) == 5
	})

	c := client.New(origin.APIAddr(), "")
	// MoA: the liars' 1e6 tok/s reasoners are never asked; those ranked
	// before the honest one are challenged first and fail.
	for range 2 {
		res, err := c.Query(t.Context(), client.QueryRequest{Query: "What is the capital of France?", Mode: "speed", MaxTokens: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.AgentResponses) != 1 || res.AgentResponses[0].Peer != r.ID().String() || res.AgentResponses[0].Unverified {
			t.Fatalf("answered by %+v, want the honest reasoner, verified", res.AgentResponses)
		}
	}
	// Pipeline: a liar's one hop at 0.001 ms/layer is the cheapest route
	// on paper; each liar left is challenged first and left out.
	for range 2 {
		res, err := c.Query(t.Context(), client.QueryRequest{Query: "Tell me about the swarm.", Mode: "pipeline", MaxTokens: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		rt := res
		if rt.Pipeline == nil {
			t.Fatalf("pipeline answer without its pipeline: %+v", rt)
		}
		if len(rt.Pipeline.Hops) != 2 || rt.Pipeline.Hops[0].Peer != a.ID().String() || rt.Pipeline.Hops[1].Peer != b.ID().String() {
			t.Fatalf("route %+v, want the honest stages", rt.Pipeline.Hops)
		}
	}
	// The one that refuses the layers it claims as not held is not
	// banned (an honest peer restarting says the same), only left out.
	faults := map[string]string{"scaled": "off by", "random": "off by", "nan": "NaN"}
	for _, lp := range liars {
		banned, why := origin.Trust().Banned(lp.h.ID())
		if want := faults[lp.kind] != ""; banned != want || !strings.Contains(why, faults[lp.kind]) {
			t.Errorf("%s liar: banned %v (%q), want banned %v", lp.kind, banned, why, want)
		}
		if lp.stage.Load() != 0 || lp.moa.Load() != 0 || lp.challenges.Load() == 0 {
			t.Errorf("%s liar got %d stage sessions, %d MoA questions, %d challenges; want 0, 0 and at least 1",
				lp.kind, lp.stage.Load(), lp.moa.Load(), lp.challenges.Load())
		}
	}
	for _, p := range []*nodetest.Peer{a, b, r} {
		if !origin.Trust().Proven(p.ID()) {
			t.Errorf("honest peer %s not verified", p.ID())
		}
	}

	// The bans are in the data dir and survive a restart.
	dir := origin.Dir
	origin.Close()
	if b, err := os.ReadFile(filepath.Join(dir, node.TrustFile)); err != nil || !strings.Contains(string(b), liars[0].h.ID().String()) {
		t.Fatalf("trust.json: %v %s", err, b)
	}
	back := nodetest.Start(t, nodetest.Config(dir))
	for _, lp := range liars {
		if banned, _ := back.Trust().Banned(lp.h.ID()); !banned && faults[lp.kind] != "" {
			t.Fatalf("the ban of the %s liar did not survive a restart", lp.kind)
		}
	}
}
