package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
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

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/node/client"
	"github.com/llmswarm/llmswarm/node/nodetest"
	"github.com/llmswarm/llmswarm/pipeline"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/verify"
)

// liarPeer is an attacker with a valid key: its own, honestly signed
// capability record claims every layer of a model at 0.001 ms per layer
// and its reasoner role at 1e6 tok/s. It answers challenges on the real
// wire format with random numbers of the right sizes, and counts the real
// work it is sent (stage sessions, MoA questions).
type liarPeer struct {
	h                      host.Host
	stage, moa, challenges atomic.Int32
	layers, hidden, vocab  int
}

func startLiar(t *testing.T, boot *nodetest.Peer, model string, layers, hidden, vocab int) *liarPeer {
	t.Helper()
	key, _, _ := crypto.GenerateEd25519Key(nil)
	h, err := libp2p.New(libp2p.Identity(key), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	lp := &liarPeer{h: h, layers: layers, hidden: hidden, vocab: vocab}
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
	done := make(chan struct{})
	go func() { // heartbeats, as a live peer sends them
		defer close(done)
		for ctx.Err() == nil {
			c := &gossip.Capability{PeerID: h.ID().String(), Seq: uint64(time.Now().UnixNano()), TimeMS: time.Now().UnixMilli(),
				Addrs: addrs, Load: gossip.Load{Capacity: 64},
				Shards: []gossip.Shard{{ModelCID: model, Start: 0, End: layers, Layers: layers, Hidden: hidden, MsPerLayer: 0.001}},
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

// answer lies: random numbers of the sizes a real trace has.
func (lp *liarPeer) answer(st network.Stream) {
	defer st.Close()
	lp.challenges.Add(1)
	req, err := verify.ReadRequest(bufio.NewReader(st))
	if err != nil {
		verify.WriteError(st, verify.CodeBadRequest, err.Error())
		return
	}
	for l := req.Start; l < req.End; l++ {
		n := req.Positions() * lp.hidden
		if l == lp.layers-1 {
			n = lp.vocab
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rand.NormFloat64())
		}
		if verify.WriteBoundary(st, l, v) != nil {
			return
		}
	}
}

// TestLiarGetsNoTraffic: a peer with a valid key whose record claims every
// layer and the reasoner role at absurd speeds is challenged before its
// first hop, fails (its numbers are random), is banned, and gets no stage
// session and no MoA question; honest peers, checked against slices this
// peer fetched, carry the pipeline and the answer. The ban survives the
// originator's restart.
func TestLiarGetsNoTraffic(t *testing.T) {
	model := tinyModel(t)
	cid, err := shards.FileCID(model)
	if err != nil {
		t.Fatal(err)
	}
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
	liar := startLiar(t, origin, cid.String(), 4, 64, 512)
	nodetest.Eventually(t, 15*time.Second, "origin sees every peer and the liar's claims", func() bool {
		return nodetest.SeesAlive(origin, a.ID(), b.ID(), r.ID(), liar.h.ID()) &&
			len(origin.Swarm().View().ByRole(moa.Reasoner)) == 2
	})

	c := client.New(origin.APIAddr(), "")
	// Pipeline: the liar's one hop at 0.001 ms/layer is the cheapest
	// route on paper; it is challenged first and left out.
	for range 2 {
		res, err := c.Query(t.Context(), client.QueryRequest{Query: "Tell me about the swarm.", Mode: "pipeline", MaxTokens: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var rt routed
		if err := json.Unmarshal(res.Pipeline, &rt.Pipeline); err != nil {
			t.Fatal(err)
		}
		for _, h := range rt.Pipeline.Hops {
			if h.Peer == liar.h.ID().String() {
				t.Fatalf("the liar is on the route: %+v", rt.Pipeline.Hops)
			}
		}
	}
	banned, why := origin.Trust().Banned(liar.h.ID())
	if !banned || !strings.Contains(why, "off by") {
		t.Fatalf("liar banned %v (%q) after its challenge", banned, why)
	}
	for _, p := range []*nodetest.Peer{a, b} {
		if !origin.Trust().Proven(p.ID()) {
			t.Fatalf("honest stage %s not verified", p.ID())
		}
	}

	// MoA: the liar's 1e6 tok/s reasoner is never asked.
	for range 2 {
		res, err := c.Query(t.Context(), client.QueryRequest{Query: "What is the capital of France?", Mode: "speed", MaxTokens: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.AgentResponses) != 1 || res.AgentResponses[0].Peer != r.ID().String() {
			t.Fatalf("answered by %+v, want the honest reasoner", res.AgentResponses)
		}
	}
	if liar.stage.Load() != 0 || liar.moa.Load() != 0 || liar.challenges.Load() == 0 {
		t.Fatalf("the liar got %d stage sessions, %d MoA questions, %d challenges; want 0, 0 and at least 1",
			liar.stage.Load(), liar.moa.Load(), liar.challenges.Load())
	}

	// The ban is in the data dir and survives a restart.
	dir := origin.Dir
	origin.Close()
	if b, err := os.ReadFile(filepath.Join(dir, node.TrustFile)); err != nil || !strings.Contains(string(b), liar.h.ID().String()) {
		t.Fatalf("trust.json: %v %s", err, b)
	}
	cfg := nodetest.Config(dir)
	back := nodetest.Start(t, cfg)
	if banned, _ := back.Trust().Banned(liar.h.ID()); !banned {
		t.Fatal("the ban did not survive a restart")
	}
}
