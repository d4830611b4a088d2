package node_test

import (
	"bytes"
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/bmc"
	"github.com/llmswarm/llmswarm/bmc/bmcsim"
	"github.com/llmswarm/llmswarm/bmcauth"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/nodetest"
)

var fakeBoardKey = bytes.Repeat([]byte{0x42}, bmc.KeySize)

// fakeDump is a table as a board with fakeBoardKey would dump it; dead
// lists the peers it declares dead, live those it declares live.
func fakeDump(t testing.TB, boot, seq uint32, live, dead []peer.ID) ([]byte, string) {
	t.Helper()
	tab := &bmc.Table{Boot: boot, Seq: seq, Uptime: time.Duration(seq) * time.Second, Period: 3 * time.Second, Misses: 2}
	for _, id := range live {
		tab.Nodes = append(tab.Nodes, bmc.Node{Handle: bmc.HandleFor([]byte(id)), Live: true, Age: time.Second})
	}
	for _, id := range dead {
		tab.Nodes = append(tab.Nodes, bmc.Node{Handle: bmc.HandleFor([]byte(id)), Age: 7 * time.Second})
	}
	nonce, err := bmc.NewNonce()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := bmc.SignTable(fakeBoardKey, nonce, tab)
	if err != nil {
		t.Fatal(err)
	}
	return raw, nonce
}

func bmcOf(t testing.TB, p *nodetest.Peer) client.BMC {
	t.Helper()
	b, err := client.New(p.APIAddr(), "").BMC(t.Context())
	if err != nil {
		t.Fatalf("GET /v1/swarm/bmc: %v", err)
	}
	return b
}

func bmcPeer(b client.BMC, id peer.ID) client.BMCPeer {
	for _, p := range b.Peers {
		if p.PeerID == id.String() {
			return p
		}
	}
	return client.BMCPeer{}
}

func nodeState(b client.BMC, id peer.ID) (alive, listed bool) {
	if b.Authority == nil {
		return false, false
	}
	for _, n := range b.Authority.Nodes {
		if n.PeerID == id.String() {
			return n.Alive, true
		}
	}
	return false, false
}

func startBoard(t *testing.T) *bmcsim.Board {
	t.Helper()
	if testing.Short() {
		t.Skip("emulated board skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	board, err := bmcsim.Start(ctx, t.TempDir())
	if errors.Is(err, bmcsim.ErrToolsMissing) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { board.Close() })
	return board
}

// TestBMCBridgeEmulatedBoard: a bridge on an emulated board publishes the
// verified table; peers that allow it accept it, see every peer alive on
// it, and once a peer dies the board declares it dead and routing excludes
// it. A table from a peer not in bmc_peers is ignored.
func TestBMCBridgeEmulatedBoard(t *testing.T) {
	board := startBoard(t)
	bridgeCfg := nodetest.Config(t.TempDir())
	bridgeCfg.BMCSerial = board.Path()
	bridge := nodetest.Start(t, bridgeCfg)
	var peers []*nodetest.Peer
	for i := 0; i < 3; i++ {
		cfg := nodetest.Config(t.TempDir())
		cfg.Bootstrap = []string{bridge.Addr(t)}
		if i < 2 {
			cfg.BMCPeers = []string{bridge.ID().String()}
		} // peers[2] allows no BMC: the stranger below publishes from it
		peers = append(peers, nodetest.Start(t, cfg))
	}
	observer, victim, stranger := peers[0], peers[1], peers[2]
	all := []peer.ID{bridge.ID(), observer.ID(), victim.ID(), stranger.ID()}
	took := nodetest.Eventually(t, 20*time.Second, "the board lists every peer alive", func() bool {
		b := bmcOf(t, observer)
		if b.Authority == nil || b.Authority.Signer != bridge.ID().String() {
			return false
		}
		for _, id := range all {
			if alive, _ := nodeState(b, id); !alive {
				return false
			}
		}
		return true
	})
	t.Logf("bridge table with 4 live peers accepted after %s", took)

	// A table from a peer not in bmc_peers is ignored.
	raw, nonce := fakeDump(t, 9, 99, nil, []peer.ID{observer.ID()})
	nodetest.Eventually(t, 10*time.Second, "stranger's table listed as ignored", func() bool {
		if err := stranger.PublishBMCForTest(t.Context(), raw, nonce); err != nil {
			t.Fatal(err)
		}
		b := bmcOf(t, observer)
		return len(b.Ignored) == 1 && b.Ignored[0].PeerID == stranger.ID().String()
	})
	if b := bmcOf(t, observer); b.Authority.Signer != bridge.ID().String() || observer.BMCDeadForTest(observer.ID()) {
		t.Fatalf("stranger's table took effect: authority %s", b.Authority.Signer)
	}

	victimID := victim.ID()
	if observer.BMCDeadForTest(victimID) {
		t.Fatal("victim excluded while alive")
	}
	victim.Close()
	killed := time.Now()
	took = nodetest.Eventually(t, 12*time.Second, "the board declares the closed peer dead", func() bool {
		alive, listed := nodeState(bmcOf(t, observer), victimID)
		return listed && !alive
	})
	t.Logf("BMC declared the closed peer dead %s after it stopped (board rule 3s x 2)", took)
	if !observer.BMCDeadForTest(victimID) {
		t.Fatal("routing does not exclude the peer the BMC declares dead")
	}
	if gossipAlive := observer.Swarm().View().Alive(victimID); gossipAlive {
		t.Logf("gossip still shows the peer alive %s after it stopped; the BMC excludes it anyway", time.Since(killed))
	}
	b := bmcOf(t, observer)
	if b.Bridge != nil || len(b.Peers) != 1 || !b.Peers[0].Authority || !b.Peers[0].Live {
		t.Fatalf("observer's BMC peers: %+v", b.Peers)
	}
	if br := bmcOf(t, bridge).Bridge; br == nil || !br.Connected || br.Published == 0 || br.RTTMS <= 0 {
		t.Fatalf("bridge status: %+v", br)
	} else {
		t.Logf("bridge: boot %d, PING round trip %.2f ms, %d tables published", br.Boot, br.RTTMS, br.Published)
	}

	// The board is unplugged and comes back with empty tables and a new
	// boot id: the bridge reconnects and refills it; receivers accept the
	// new boot.
	if err := board.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	took = nodetest.Eventually(t, 20*time.Second, "tables of the rebooted board accepted and refilled", func() bool {
		b := bmcOf(t, observer)
		if b.Authority == nil || b.Authority.Boot < 2 {
			return false
		}
		for _, id := range []peer.ID{bridge.ID(), observer.ID(), stranger.ID()} {
			if alive, _ := nodeState(b, id); !alive {
				return false
			}
		}
		return true
	})
	t.Logf("board restarted: bridge reconnected and the new boot's table accepted after %s", took)
}

// TestBMCReplayedTableIgnored: an allowed BMC's tables must move forward in
// (boot id, seq, uptime); an older one, replayed under a fresh envelope, is
// ignored, and a board reboot (a higher boot id) is accepted.
func TestBMCReplayedTableIgnored(t *testing.T) {
	fake := nodetest.Start(t, nodetest.Config(t.TempDir()))
	cfg := nodetest.Config(t.TempDir())
	cfg.Bootstrap = []string{fake.Addr(t)}
	cfg.BMCPeers = []string{fake.ID().String()}
	rx := nodetest.Start(t, cfg)
	victim := rx.ID()

	publishUntil := func(what string, raw []byte, nonce string, cond func(client.BMC) bool) {
		t.Helper()
		nodetest.Eventually(t, 10*time.Second, what, func() bool {
			if err := fake.PublishBMCForTest(t.Context(), raw, nonce); err != nil {
				t.Fatal(err)
			}
			return cond(bmcOf(t, rx))
		})
	}
	raw10, n10 := fakeDump(t, 2, 10, []peer.ID{victim}, nil)
	publishUntil("table (2, 10) accepted", raw10, n10, func(b client.BMC) bool {
		return b.Authority != nil && b.Authority.Seq == 10
	})
	raw5, n5 := fakeDump(t, 2, 5, nil, []peer.ID{victim})
	publishUntil("older table (2, 5) counted as stale", raw5, n5, func(b client.BMC) bool {
		return bmcPeer(b, fake.ID()).Stale > 0
	})
	if b := bmcOf(t, rx); b.Authority.Seq != 10 || b.Authority.Boot != 2 || rx.BMCDeadForTest(victim) {
		t.Fatalf("a replayed older table took effect: %+v", b.Authority)
	}
	raw1, n1 := fakeDump(t, 3, 1, nil, []peer.ID{victim})
	publishUntil("table after a board reboot (3, 1) accepted", raw1, n1, func(b client.BMC) bool {
		return b.Authority != nil && b.Authority.Boot == 3
	})
	if !rx.BMCDeadForTest(victim) {
		t.Fatal("the new table's dead node is not excluded")
	}
}

// TestBMCAuthorityFailover: with two allowed BMCs the lowest peer ID is the
// authority; when it goes silent for longer than the freshness window the
// other takes over, and when both are silent nobody is declared dead.
func TestBMCAuthorityFailover(t *testing.T) {
	bridges := []*nodetest.Peer{nodetest.Start(t, nodetest.Config(t.TempDir())), nil}
	cfg := nodetest.Config(t.TempDir())
	cfg.Bootstrap = []string{bridges[0].Addr(t)}
	bridges[1] = nodetest.Start(t, cfg)
	sort.Slice(bridges, func(i, j int) bool { return bridges[i].ID().String() < bridges[j].ID().String() })
	first, second := bridges[0], bridges[1]
	cfg = nodetest.Config(t.TempDir())
	cfg.Bootstrap = []string{first.Addr(t), second.Addr(t)}
	cfg.BMCPeers = []string{second.ID().String(), first.ID().String()}
	rx := nodetest.Start(t, cfg)
	victim := rx.ID()

	// Each bridge republishes a newer table every 300 ms until stopped:
	// the first declares the victim dead, the second alive.
	publish := func(p *nodetest.Peer, boot uint32, dead bool) context.CancelFunc {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			for seq := uint32(1); ctx.Err() == nil; seq++ {
				live, gone := []peer.ID{victim}, []peer.ID(nil)
				if dead {
					live, gone = nil, live
				}
				raw, nonce := fakeDump(t, boot, seq, live, gone)
				if err := p.PublishBMCForTest(ctx, raw, nonce); err != nil && ctx.Err() == nil {
					t.Errorf("publishing: %v", err)
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(300 * time.Millisecond):
				}
			}
		}()
		stop := func() { cancel(); <-done }
		t.Cleanup(stop)
		return stop
	}
	stopFirst := publish(first, 1, true)
	stopSecond := publish(second, 7, false)
	nodetest.Eventually(t, 10*time.Second, "the lowest peer ID is the authority", func() bool {
		b := bmcOf(t, rx)
		return b.Authority != nil && b.Authority.Signer == first.ID().String() && bmcPeer(b, second.ID()).Live
	})
	if !rx.BMCDeadForTest(victim) {
		t.Fatal("the authority's dead node is not excluded")
	}
	stopFirst()
	took := nodetest.Eventually(t, bmcauth.Freshness+5*time.Second, "the second BMC takes over", func() bool {
		b := bmcOf(t, rx)
		return b.Authority != nil && b.Authority.Signer == second.ID().String()
	})
	t.Logf("failover %s after the authority went silent (freshness window %s)", took, bmcauth.Freshness)
	if took < bmcauth.Freshness-time.Second {
		t.Fatalf("failover after %s, want about %s", took, bmcauth.Freshness)
	}
	if rx.BMCDeadForTest(victim) {
		t.Fatal("the new authority's live node is still excluded")
	}
	stopSecond()
	nodetest.Eventually(t, bmcauth.Freshness+5*time.Second, "no table in force once every BMC is silent", func() bool {
		b := bmcOf(t, rx)
		return b.Authority == nil && b.Message != ""
	})
	if rx.BMCDeadForTest(victim) {
		t.Fatal("a peer is excluded while no BMC table is in force")
	}
}

// TestBMCNotConfigured: without bmc_peers or bmc_serial the API says so.
func TestBMCNotConfigured(t *testing.T) {
	p := nodetest.Start(t, nodetest.Config(t.TempDir()))
	_, err := client.New(p.APIAddr(), "").BMC(t.Context())
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("BMC on an unconfigured peer: %v", err)
	}
}
