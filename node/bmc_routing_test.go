package node_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// tinyModel is the tiny synthetic qwen3 in f32.
func tinyModel(t *testing.T) string { return nodetest.TinyModel(t, "f32") }

// q8Model is the tiny synthetic model in q8_0, as phones run it.
func q8Model(t *testing.T) string { return nodetest.TinyModel(t, "q8_0") }

// tinyModelOf is the tiny synthetic qwen3 in typ.
func tinyModelOf(t *testing.T, typ string) string { return nodetest.TinyModel(t, typ) }

// TestBMCRoutingObeys: a pipeline never routes through a peer the
// authoritative BMC table declares dead, though gossip shows it alive; and
// a running session whose stage it declares dead re-routes.
func TestBMCRoutingObeys(t *testing.T) {
	model := tinyModel(t)
	bmcPeer := nodetest.Start(t, nodetest.Config(t.TempDir()))
	boot := bmcPeer.Addr(t)
	stage := func(spec string) *nodetest.Peer {
		cfg := nodetest.Config(t.TempDir())
		cfg.Bootstrap = []string{boot}
		cfg.Shards = []string{model + ":" + spec}
		cfg.Engine = node.EngineConfig{Threads: 1}
		return nodetest.Start(t, cfg)
	}
	first, mid, spare, last := stage("0-1"), stage("1-3"), stage("1-3"), stage("3-4")
	cfg := nodetest.Config(t.TempDir())
	cfg.Bootstrap = []string{boot}
	cfg.BMCPeers = []string{bmcPeer.ID().String()}
	origin := nodetest.Start(t, cfg)
	all := []peer.ID{first.ID(), mid.ID(), spare.ID(), last.ID()}
	nodetest.Eventually(t, 10*time.Second, "origin sees every stage", func() bool { return nodetest.SeesShards(origin, all...) })

	c := client.New(origin.APIAddr(), "")
	ask := func(maxTokens int, onEvent func(client.Event)) *answer.Result {
		t.Helper()
		res, err := c.Query(t.Context(), client.QueryRequest{Query: "Tell me about the swarm.", Mode: "pipeline",
			MaxTokens: maxTokens, Stream: onEvent != nil}, onEvent)
		if err != nil {
			t.Fatal(err)
		}
		if res.Pipeline == nil {
			t.Fatalf("pipeline answer without its pipeline: %+v", res)
		}
		return res
	}
	used := ask(4, nil).Pipeline.Hops[1].Peer
	other := spare.ID()
	if used == spare.ID().String() {
		other = mid.ID()
	}
	usedID, _ := peer.Decode(used)

	// The BMC declares the middle stage the route used dead.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	publish := func(dead peer.ID) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint32(1); ; seq++ {
				live := []peer.ID{}
				for _, id := range all {
					if id != dead {
						live = append(live, id)
					}
				}
				raw, nonce := fakeDump(t, 1, seq, live, []peer.ID{dead})
				bmcPeer.PublishBMCForTest(context.Background(), raw, nonce)
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	publish(usedID)
	nodetest.Eventually(t, 10*time.Second, "BMC table in force", func() bool { return origin.BMCDeadForTest(usedID) })
	if !origin.Swarm().View().Alive(usedID) {
		t.Fatal("gossip already shows the peer dead: the test proves nothing")
	}
	if got := ask(4, nil).Pipeline.Hops[1].Peer; got != other.String() {
		t.Fatalf("route goes through %s, which the BMC declared dead", got)
	}
	close(stop)
	wg.Wait()

	// A running session: declare its middle stage dead once it has started.
	stop = make(chan struct{})
	var running string
	started := false
	res := ask(3000, func(ev client.Event) {
		if ev.Type == "trace" && !started {
			if tr := ev.Trace; tr.Kind == "route" {
				started = true
				running = tr.Route[1].Peer
				id, _ := peer.Decode(running)
				publish(id)
			}
		}
	})
	close(stop)
	wg.Wait()
	if len(res.Pipeline.Reroutes) != 1 || res.Pipeline.Reroutes[0].Failed != running ||
		!strings.Contains(res.Pipeline.Reroutes[0].Reason, "declared dead") {
		t.Fatalf("running session did not re-route around the BMC-dead stage %s: %+v", running, res.Pipeline.Reroutes)
	}
}
