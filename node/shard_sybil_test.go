package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/api"
	"github.com/llmswarm/llmswarm/ledger"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

// dhtHolder is a peer that exists for the fetcher only in the DHT: a bare
// libp2p host that provides the model's key in the swarm's DHT and serves
// one slice over the real shard-transfer protocol (with the model's real
// manifest, so that only its slice gives it away when it lies).
type dhtHolder struct {
	h   host.Host
	srv *shards.TransferServer
}

func startDHTHolder(t *testing.T, ctx context.Context, fetcher *nodetest.Peer, slice, root string, manifest []byte) *dhtHolder {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay(), nodetest.Member())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	st, err := shards.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// The slice goes in before the manifest: the store would check it.
	if _, err := st.ImportSlice(slice, root); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutManifest(root, manifest); err != nil {
		t.Fatal(err)
	}
	srv, err := shards.NewTransferServer(h, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	d, err := dht.New(ctx, h, dht.ProtocolPrefix("/swarm"), dht.Mode(dht.ModeServer))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := h.Connect(ctx, peer.AddrInfo{ID: fetcher.ID(), Addrs: fetcher.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	nodetest.Eventually(t, 10*time.Second, "the holder's DHT knows the fetcher", func() bool {
		return slices.Contains(d.RoutingTable().ListPeers(), fetcher.ID())
	})
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.Provide(pctx, swarm.ModelKey(root), true); err != nil {
		t.Fatal(err)
	}
	return &dhtHolder{h: h, srv: srv}
}

// providers is who the fetcher finds in the DHT for root.
func providers(t *testing.T, n *nodetest.Peer, root string) map[peer.ID]bool {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	found, _ := n.Swarm().FindProviders(ctx, swarm.ModelKey(root), 16)
	out := map[peer.ID]bool{}
	for _, ai := range found {
		out[ai.ID] = true
	}
	return out
}

// TestShardSybilsBanned: five peers known only from the DHT announce a
// model and serve a poisoned slice of it (the real manifest, a slice with
// an altered vocabulary). A peer adding the shard downloads each one's
// poison at most twice: each bad file is logged with the peer, the second
// bans the peer, and a banned peer is not asked again. Once an honest
// holder appears, the shard arrives and is served. In f32, q8_0 and q4_k.
func TestShardSybilsBanned(t *testing.T) {
	for _, typ := range []string{"f32", "q8_0", "q4_k"} {
		t.Run(typ, func(t *testing.T) { testShardSybilsBanned(t, typ) })
	}
}

func testShardSybilsBanned(t *testing.T, typ string) {
	full := tinyModelOf(t, typ)
	_, manifest, rootCID, err := shards.BuildManifest(full)
	if err != nil {
		t.Fatal(err)
	}
	root := rootCID.String()
	honestSlice := filepath.Join(t.TempDir(), "honest.gguf")
	if _, err := shards.SliceFile(full, honestSlice, 0, 2); err != nil {
		t.Fatal(err)
	}
	poison := poisonedSlice(t, full)
	fi, err := os.Stat(poison)
	if err != nil {
		t.Fatal(err)
	}

	cfg := nodetest.Config(t.TempDir())
	cfg.Engine = node.EngineConfig{Threads: 1}
	logs := &logBuffer{}
	fetcher := &nodetest.Peer{Node: &node.Node{Config: cfg, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))}, Dir: cfg.DataDir}
	fetcher.API = api.New(fetcher.Node, nil)
	if err := fetcher.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fetcher.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sybils []*dhtHolder
	for range 5 {
		sybils = append(sybils, startDHTHolder(t, ctx, fetcher, poison, root, manifest))
	}
	nodetest.Eventually(t, 20*time.Second, "the fetcher finds the five sybils in the DHT", func() bool {
		found := providers(t, fetcher, root)
		for _, s := range sybils {
			if !found[s.h.ID()] {
				return false
			}
		}
		return true
	})

	spec := root + ":0-2"
	for round := 1; round <= 3; round++ {
		if _, err := fetcher.AddShard(t.Context(), spec); err == nil {
			t.Fatalf("round %d: the shard was added from sybils", round)
		}
	}
	var poisonBytes, recorded int64
	var bodies int64
	for i, s := range sybils {
		st := s.srv.Stats()
		poisonBytes += st.BytesSent
		bodies += st.Served
		rec := fetcher.SourceStatForTest(s.h.ID())
		recorded += rec.PoisonBytes
		t.Logf("sybil %d: %d requests, %d bodies, %d bytes sent; fetcher recorded %d faults, %d poison bytes",
			i, st.Requests, st.Served, st.BytesSent, rec.Faults, rec.PoisonBytes)
		if rec.Faults > 2 || st.Requests > 3 {
			t.Errorf("sybil %d was asked %d times (%d bad files recorded): want at most 2 slices", i, st.Requests, rec.Faults)
		}
		if banned, why := fetcher.Trust().Banned(s.h.ID()); !banned {
			t.Errorf("sybil %d not banned after %d bad files", i, rec.Faults)
		} else if i == 0 {
			t.Logf("ban reason: %s", why)
		}
		if n := logs.count(fmt.Sprintf("shard source sent a file that fails its check\" peer=%s", s.h.ID())); n == 0 {
			t.Errorf("sybil %d's bad slice not logged with its peer ID", i)
		}
	}
	// One sybil served the fetcher the model's (real) manifest, once.
	poisonBytes -= int64(len(manifest))
	bodies--
	t.Logf("figures: 5 sybils, 3 add attempts: %d slice bodies downloaded, %d poison bytes served (%d recorded by the fetcher); one poisoned slice is %d bytes",
		bodies, poisonBytes, recorded, fi.Size())
	if limit := 5 * 2 * fi.Size(); poisonBytes > limit {
		t.Errorf("%d bytes of poison downloaded, want at most %d (two slices a sybil)", poisonBytes, limit)
	}

	honest := startDHTHolder(t, ctx, fetcher, honestSlice, root, manifest)
	nodetest.Eventually(t, 20*time.Second, "the fetcher finds the honest holder in the DHT", func() bool {
		return providers(t, fetcher, root)[honest.h.ID()]
	})
	sh, err := fetcher.AddShard(t.Context(), spec)
	if err != nil {
		t.Fatalf("the shard was not fetched from the honest holder: %v", err)
	}
	if sh.Start != 0 || sh.End != 2 || sh.ModelCID != root {
		t.Fatalf("served %+v, want layers [0,2) of %s", sh, root)
	}
	if banned, _ := fetcher.Trust().Banned(honest.h.ID()); banned {
		t.Fatal("the honest holder was banned")
	}
	// The honest holder alone gets a receipt: for the slice it sent.
	l, err := fetcher.Ledger()
	if err != nil {
		t.Fatal(err)
	}
	hfi, err := os.Stat(honestSlice)
	if err != nil {
		t.Fatal(err)
	}
	want := float64(hfi.Size()) / ledger.ShardMiB
	if len(l.Accounts) != 1 || l.Accounts[0].Peer != honest.h.ID().String() || l.Accounts[0].Taken < want*0.99 || l.Accounts[0].Taken > want {
		t.Fatalf("fetcher's ledger %+v: want %.3f taken from the honest holder alone", l.Accounts, want)
	}
}
