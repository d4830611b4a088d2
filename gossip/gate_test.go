package gossip_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/gossip/gossiptest"
)

// ledger is a ban list the test controls (swarm.Trust in the product).
type ledger struct {
	mu     sync.Mutex
	banned map[peer.ID]bool
}

func (l *ledger) Banned(p peer.ID) (bool, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.banned[p] {
		return true, "failed a check"
	}
	return false, ""
}

func (l *ledger) Proven(peer.ID) bool { return false }

func (l *ledger) ban(p peer.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.banned == nil {
		l.banned = map[peer.ID]bool{}
	}
	l.banned[p] = true
}

type testPeer struct {
	key    crypto.PrivKey
	h      host.Host
	r      *gossip.Router
	counts sync.Map // author -> *atomic.Int64 of records received
	seqs   sync.Map // author -> *atomic.Uint64, the highest seq received
}

// newPeer starts a host on ip (loopback when empty) and, unless raw, a
// router with opts; a gate among opts also gates the host.
func newPeer(t *testing.T, ctx context.Context, ip string, gate *gossip.Gate, opts ...gossip.Option) *testPeer {
	t.Helper()
	if ip == "" {
		ip = "127.0.0.1"
	}
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	hopts := []libp2p.Option{libp2p.Identity(k), libp2p.ListenAddrStrings("/ip4/" + ip + "/tcp/0"), libp2p.DisableRelay()}
	if gate != nil {
		hopts = append(hopts, libp2p.ConnectionGater(gate))
		opts = append(opts, gossip.WithGate(gate))
	}
	h, err := libp2p.New(hopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	p := &testPeer{key: k, h: h}
	if opts == nil {
		return p
	}
	// The flood limit of the peers beat drives (an option of the test's own
	// comes after it, and wins).
	opts = append([]gossip.Option{gossip.WithHeartbeat(beatEvery)}, opts...)
	if p.r, err = gossip.NewRouter(ctx, h, k, nil, opts...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.r.Close() })
	sub, err := p.r.SubscribeCapabilities()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer sub.Cancel()
		for {
			c, _, err := sub.NextFrom(ctx)
			if err != nil {
				return
			}
			id, _ := peer.Decode(c.PeerID)
			n, _ := p.counts.LoadOrStore(id, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			s, _ := p.seqs.LoadOrStore(id, new(atomic.Uint64))
			for old := s.(*atomic.Uint64).Load(); c.Seq > old && !s.(*atomic.Uint64).CompareAndSwap(old, c.Seq); old = s.(*atomic.Uint64).Load() {
			}
		}
	}()
	t.Cleanup(wg.Wait)
	return p
}

// heard is how many records of author p has received.
func (p *testPeer) heard(author peer.ID) int64 {
	n, ok := p.counts.Load(author)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

func (p *testPeer) lastSeq(author peer.ID) uint64 {
	s, ok := p.seqs.Load(author)
	if !ok {
		return 0
	}
	return s.(*atomic.Uint64).Load()
}

func connect(t *testing.T, ctx context.Context, a, b host.Host) {
	t.Helper()
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

func record(t *testing.T, p *testPeer, seq uint64) []byte {
	t.Helper()
	b, err := gossip.SealCapability(&gossip.Capability{PeerID: p.h.ID().String(), Seq: seq}, p.key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// beatEvery is how often beat publishes: the routers that hear such a
// peer take it as their flood limit (WithHeartbeat), as a swarm's peers
// share one heartbeat.
const beatEvery = 100 * time.Millisecond

// beat publishes a record of p every beatEvery until ctx ends.
func beat(ctx context.Context, t *testing.T, p *testPeer, seq *atomic.Uint64) {
	go func() {
		for ctx.Err() == nil {
			p.r.PublishCapability(ctx, &gossip.Capability{PeerID: p.h.ID().String(), Seq: seq.Add(1)})
			select {
			case <-ctx.Done():
			case <-time.After(beatEvery):
			}
		}
	}()
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRefuserIsCutOff: an adversary that opens its own gossip stream to
// the victim but refuses the victim's (so go-libp2p-pubsub never scores
// it) is heard only for the gate's grace period: then the victim drops
// its connection, refuses it when it comes back, and hears none of its
// records. A well-behaved peer connected for as long is never gated.
func TestRefuserIsCutOff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gate := gossip.NewGate(nil, 500*time.Millisecond)
	victim := newPeer(t, ctx, "", gate)
	honest := newPeer(t, ctx, "", nil, gossip.WithHeartbeat(beatEvery))
	connect(t, ctx, honest.h, victim.h)
	var honestSeq atomic.Uint64
	beat(ctx, t, honest, &honestSeq)

	adv := newPeer(t, ctx, "", nil)
	raw := gossiptest.NewRaw(adv.h, false)
	defer raw.Close()
	connect(t, ctx, adv.h, victim.h)
	if err := raw.Open(ctx, victim.h.ID(), gossip.CapsTopic); err != nil {
		t.Fatal(err)
	}
	var seq uint64
	var last time.Time
	send := func() error {
		// At the honest rate: a refuser that also floods is cut off as
		// invalid before the refusal is judged.
		if time.Since(last) < beatEvery {
			return nil
		}
		last = time.Now()
		seq++
		m, err := gossiptest.Sign(adv.key, gossip.CapsTopic, record(t, adv, seq), seq)
		if err != nil {
			t.Fatal(err)
		}
		return raw.Send(victim.h.ID(), m)
	}
	// Heard at first: the attack path is live.
	eventually(t, 10*time.Second, "the refuser's records reach the victim", func() bool {
		send()
		return victim.heard(adv.h.ID()) > 0
	})
	eventually(t, 10*time.Second, "the refuser gated", func() bool {
		send()
		gated, why := victim.r.Gate().Gated(adv.h.ID())
		return gated && why == gossip.GateRefused
	})
	eventually(t, 10*time.Second, "the refuser disconnected", func() bool {
		return victim.h.Network().Connectedness(adv.h.ID()) != network.Connected
	})
	cut := victim.lastSeq(adv.h.ID())
	// It comes back and tries again (with Noise the dialer's side of a
	// connection the gater refuses may look up for a moment).
	if adv.h.Connect(ctx, peer.AddrInfo{ID: victim.h.ID(), Addrs: victim.h.Addrs()}) == nil {
		if raw.Open(ctx, victim.h.ID(), gossip.CapsTopic) == nil {
			send()
		}
	}
	// The honest peer keeps being heard; the refuser is not.
	before := victim.heard(honest.h.ID())
	eventually(t, 10*time.Second, "the honest peer still heard", func() bool {
		return victim.heard(honest.h.ID()) >= before+3
	})
	if got := victim.lastSeq(adv.h.ID()); got > cut {
		t.Fatalf("a record of the refuser sent after it was gated (seq %d > %d) reached the victim", got, cut)
	}
	if gated, _ := victim.r.Gate().Gated(honest.h.ID()); gated || victim.r.Gate().Strikes(honest.h.ID()) != 0 {
		t.Fatal("the well-behaved peer was gated")
	}
	if victim.r.Gate().Strikes(adv.h.ID()) != 1 {
		t.Fatalf("refuser strikes %d, want 1", victim.r.Gate().Strikes(adv.h.ID()))
	}
}

// TestBannedPeerUnheard: once the victim's ledger bans a peer, the
// victim drops its connection, refuses new ones, and drops its records
// even when an honest peer forwards them.
func TestBannedPeerUnheard(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &ledger{}
	gate := gossip.NewGate(l, 0)
	victim := newPeer(t, ctx, "", gate)
	relay := newPeer(t, ctx, "", nil, gossip.WithHeartbeat(beatEvery))
	liar := newPeer(t, ctx, "", nil, gossip.WithHeartbeat(beatEvery))
	connect(t, ctx, relay.h, victim.h)
	connect(t, ctx, liar.h, relay.h)
	connect(t, ctx, liar.h, victim.h)
	var relaySeq, liarSeq atomic.Uint64
	beat(ctx, t, relay, &relaySeq)
	beat(ctx, t, liar, &liarSeq)
	eventually(t, 10*time.Second, "the liar heard", func() bool { return victim.heard(liar.h.ID()) > 0 })

	l.ban(liar.h.ID())
	victim.r.Ban(liar.h.ID())
	banSeq := liarSeq.Load() // every record after this one is sealed after the ban
	eventually(t, 10*time.Second, "the liar disconnected", func() bool {
		return victim.h.Network().Connectedness(liar.h.ID()) != network.Connected
	})
	liar.h.Connect(ctx, peer.AddrInfo{ID: victim.h.ID(), Addrs: victim.h.Addrs()}) // refused by the gater
	// The relay still carries the liar's records to the victim's mesh:
	// the liar keeps beating and the relay keeps hearing it.
	relayHeard := relay.heard(liar.h.ID())
	before := victim.heard(relay.h.ID())
	eventually(t, 15*time.Second, "time passes: the relay heard 5 more liar records and the victim 5 more relay records", func() bool {
		return relay.heard(liar.h.ID()) >= relayHeard+5 && victim.heard(relay.h.ID()) >= before+5
	})
	if got := victim.lastSeq(liar.h.ID()); got > banSeq+1 {
		t.Fatalf("the banned liar's record seq %d (ban at %d) reached the victim", got, banSeq)
	}
	if gated, why := victim.r.Gate().Gated(liar.h.ID()); !gated || why != gossip.GateBanned {
		t.Fatalf("gated %v (%s), want banned", gated, why)
	}
}

// nonLoopbackIP returns an IPv4 address of this machine that is not
// loopback.
func nonLoopbackIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip("no interface addresses:", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address to colocate peers on")
	return ""
}

// TestColocationGraylists: many identities on one IP fall below the
// graylist threshold and are no longer heard, on loopback (which pubsub
// leaves out of its own count) as on any other address; whitelisting
// their network turns the factor off for it.
func TestColocationGraylists(t *testing.T) {
	t.Run("loopback", func(t *testing.T) { colocationGraylists(t, "127.0.0.1") })
	t.Run("interface", func(t *testing.T) { colocationGraylists(t, nonLoopbackIP(t)) })
}

func colocationGraylists(t *testing.T, ip string) {
	for _, tc := range []struct {
		name      string
		whitelist bool
	}{{"on", false}, {"whitelisted", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			col := gossip.Colocation{Threshold: 1, Weight: -400}
			if tc.whitelist {
				_, n, _ := net.ParseCIDR(ip + "/32")
				col.Whitelist = []*net.IPNet{n}
			}
			var mu sync.Mutex
			scores := map[peer.ID]float64{}
			victim := newPeer(t, ctx, ip, nil, gossip.WithColocation(col), gossip.WithHeartbeat(beatEvery),
				gossip.WithScoreInspectForTest(func(m map[peer.ID]float64) {
					mu.Lock()
					defer mu.Unlock()
					scores = m
				}))
			var sybils []*testPeer
			seqs := make([]atomic.Uint64, 3)
			for i := range seqs {
				s := newPeer(t, ctx, ip, nil, gossip.WithHeartbeat(beatEvery))
				connect(t, ctx, s.h, victim.h)
				beat(ctx, t, s, &seqs[i])
				sybils = append(sybils, s)
			}
			low := func() bool {
				mu.Lock()
				defer mu.Unlock()
				for _, s := range sybils {
					if sc, ok := scores[s.h.ID()]; !ok || sc >= gossip.GraylistThreshold {
						return false
					}
				}
				return true
			}
			if tc.whitelist {
				// Scored (tracked), none penalised, all heard.
				eventually(t, 10*time.Second, "every sybil scored and heard", func() bool {
					mu.Lock()
					n := 0
					for _, s := range sybils {
						if sc, ok := scores[s.h.ID()]; ok && sc >= 0 {
							n++
						}
					}
					mu.Unlock()
					return n == len(sybils) && victim.heard(sybils[2].h.ID()) > 3
				})
				return
			}
			eventually(t, 10*time.Second, "colocated peers graylisted", low)
			cut := make([]uint64, len(sybils))
			for i := range sybils {
				cut[i] = seqs[i].Load()
			}
			eventually(t, 10*time.Second, "time passes: 5 more records each", func() bool {
				for i := range sybils {
					if seqs[i].Load() < cut[i]+5 {
						return false
					}
				}
				return true
			})
			for i, s := range sybils {
				if got := victim.lastSeq(s.h.ID()); got > cut[i]+1 {
					t.Fatalf("sybil %d: record seq %d heard after it was graylisted at %d", i, got, cut[i])
				}
			}
		})
	}
}
