package pipeline

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/internal/gputest"
	"github.com/llmswarm/llmswarm/internal/nettest"
	"github.com/llmswarm/llmswarm/shards"
	"github.com/llmswarm/llmswarm/swarm"
)

var (
	testDir   string
	modelsMu  sync.Mutex
	modelFile = map[string]string{}
)

func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	d, err := os.MkdirTemp("", "pipeline-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testDir = d
	if err := gputest.Setup(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// model writes the tiny f32 synthetic model of arch once per test binary.
func model(t *testing.T, arch string) (path, cid string) {
	t.Helper()
	return modelOf(t, arch, "tiny", "f32")
}

// modelOf writes a synthetic model once per test binary.
func modelOf(t testing.TB, arch, size, typ string) (path, cid string) {
	t.Helper()
	modelsMu.Lock()
	defer modelsMu.Unlock()
	key := arch
	if size != "tiny" || typ != "f32" {
		key = arch + "-" + size + "-" + typ
	}
	p := filepath.Join(testDir, key+".gguf")
	if _, ok := modelFile[key]; !ok {
		if err := engine.Synth(context.Background(), p, engine.SynthSpec{Arch: arch, Size: size, Type: typ, Seed: 3}); err != nil {
			t.Fatal(err)
		}
		_, _, c, err := shards.BuildManifest(p)
		if err != nil {
			t.Fatal(err)
		}
		modelFile[key] = c.String()
	}
	return p, modelFile[key]
}

// stagePeer is a host serving some shards.
type stagePeer struct {
	h     host.Host
	srv   *StageServer
	proxy *nettest.Proxy // when set, the only way others reach this peer
	batch bool           // serve shards batching sessions' steps (a node's pipeline.batch)
	plain bool           // serve Q4 weights unrepacked, naming a build without the repacked kernels
	gpu   bool           // serve shards with every layer that fits on the GPU (gputest)
}

// addrs is where others dial this peer.
func (p *stagePeer) addrs() []ma.Multiaddr {
	if p.proxy != nil {
		a, err := manet.FromNetAddr(p.proxy.Addr())
		if err != nil {
			panic(err)
		}
		return []ma.Multiaddr{a}
	}
	return p.h.Addrs()
}

// behindProxy puts a freezable proxy in front of p: freezing it hangs p
// for everyone else, as SIGSTOP would.
func (p *stagePeer) behindProxy(t testing.TB) *nettest.Proxy {
	t.Helper()
	for _, a := range p.h.Addrs() {
		if na, err := manet.ToNetAddr(a); err == nil {
			p.proxy = nettest.NewProxy(t, na.String())
			return p.proxy
		}
	}
	t.Fatal("no TCP address to proxy")
	return nil
}

func newStagePeer(t testing.TB) *stagePeer {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	p := &stagePeer{h: h, srv: NewStageServer(h, nil)}
	t.Cleanup(func() { p.srv.Close(); h.Close() })
	return p
}

// serve slices the model to [a,b) and serves it.
func (p *stagePeer) serve(t *testing.T, arch string, a, b int) {
	t.Helper()
	full, cid := model(t, arch)
	p.serveFile(t, full, cid, a, b)
}

// serveFile slices the model file to [a,b) and serves it.
func (p *stagePeer) serveFile(t testing.TB, full, cid string, a, b int) {
	t.Helper()
	out := filepath.Join(t.TempDir(), fmt.Sprintf("%s.%d-%d.gguf", filepath.Base(full), a, b))
	if _, err := shards.Slice(full, out, a, b); err != nil {
		t.Fatal(err)
	}
	opts := engine.Options{Threads: 1, Slots: 4, Context: 1024, Isolated: !p.batch, NoRepack: p.plain}
	if p.gpu {
		opts.GPULayers = engine.GPULayersAll
	}
	sh, err := LoadShard(context.Background(), out, cid, a, b, opts)
	if err != nil {
		t.Fatal(err)
	}
	p.srv.Add(sh)
}

// originatorFor builds an originator whose view holds the stage peers.
// servingPeers starts one stage peer per range, each serving that range
// of the model at full.
func servingPeers(t testing.TB, full, cid string, ranges ...[2]int) []*stagePeer {
	t.Helper()
	var out []*stagePeer
	for _, r := range ranges {
		p := newStagePeer(t)
		p.serveFile(t, full, cid, r[0], r[1])
		out = append(out, p)
	}
	return out
}

func originatorFor(t *testing.T, arch string, self *stagePeer, stages ...*stagePeer) *Originator {
	t.Helper()
	full, _ := model(t, arch)
	return originatorForFile(t, full, self, stages...)
}

// originatorForFile is originatorFor with the model given by file.
func originatorForFile(t testing.TB, full string, self *stagePeer, stages ...*stagePeer) *Originator {
	t.Helper()
	return originatorTrusting(t, full, nil, self, stages...)
}

// measured gives peers (in pairs: the first two one route, the next two
// the other) per-layer speeds of 1, 1, 2, 2 ms, announced and measured, so
// that the first route is the cheapest and the other all that is left.
// Call it before the view hears them (originatorTrusting): what each
// measured when it loaded, on a loaded machine, could make a route mixing
// both pairs the cheapest and leave no second route over other peers.
func measured(cid string, peers []*stagePeer) *swarm.Trust {
	ms := make([]float64, len(peers))
	for i := range peers {
		ms[i] = float64(1 + i/2)
	}
	return priced(cid, peers, ms...)
}

// priced gives each of peers the per-layer speed in ms, announced and
// measured (see measured: call it before the view hears them).
func priced(cid string, peers []*stagePeer, ms ...float64) *swarm.Trust {
	tr := swarm.NewTrust()
	for i, p := range peers {
		p.srv.Local()[0].MsPerLayer = ms[i]
		tr.Measure(p.h.ID(), swarm.MsPerLayerKey(cid), ms[i])
	}
	return tr
}

// originatorTrusting is originatorForFile with tr as its view's ledger
// (nil: none).
func originatorTrusting(t testing.TB, full string, tr *swarm.Trust, self *stagePeer, stages ...*stagePeer) *Originator {
	t.Helper()
	v := swarm.NewView(self.h.ID(), swarm.Liveness{}, swarm.WithTrust(tr))
	all := append([]*stagePeer{self}, stages...)
	for _, p := range all { // every peer knows the others' addresses, as the swarm's records teach them
		for _, q := range all {
			if p != q {
				p.h.Peerstore().AddAddrs(q.h.ID(), q.addrs(), time.Hour)
			}
		}
	}
	for i, p := range all {
		var addrs []string
		for _, a := range p.addrs() {
			addrs = append(addrs, a.String())
		}
		v.Observe(&gossip.Capability{PeerID: p.h.ID().String(), Seq: uint64(i + 1), Addrs: addrs, Shards: p.srv.Shards(), Load: gossip.Load{Capacity: 4}, Platform: gossip.Platform{Arch: p.arch()}}, time.Now())
	}
	tok, err := engine.LoadTokenizer(full)
	if err != nil {
		t.Fatal(err)
	}
	// No random spot-checks, no probation: a test that wants them says so.
	return &Originator{Host: self.h, View: v, Local: self.srv, SpotCheck: SpotCheck{Probability: -1, Probation: -1},
		Tokenizer: func(context.Context, ModelRef, []swarm.ShardHolder) (*engine.Tokenizer, error) { return tok, nil }}
}

// cutRoute serves the model cut at cuts ([0, a, b, ..., layers]), a stage
// peer per slice, and plans a route over them from an originator peer.
func cutRoute(t *testing.T, full, cid string, cuts []int) (*Originator, ModelRef, []Hop) {
	t.Helper()
	origin := newStagePeer(t)
	var stages []*stagePeer
	for i := 1; i < len(cuts); i++ {
		p := newStagePeer(t)
		p.serveFile(t, full, cid, cuts[i-1], cuts[i])
		stages = append(stages, p)
	}
	o := originatorForFile(t, full, origin, stages...)
	ref, hs, err := o.Resolve(cid)
	if err != nil {
		t.Fatal(err)
	}
	hops, err := o.plan(ref, hs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return o, ref, hops
}

// reference is the single-machine greedy generation.
func reference(t *testing.T, arch string, msgs []engine.Message, n int) []int32 {
	t.Helper()
	full, _ := model(t, arch)
	return referenceFile(t, full, msgs, n)
}

// referenceFile is reference with the model given by file.
func referenceFile(t *testing.T, full string, msgs []engine.Message, n int) []int32 {
	t.Helper()
	return referenceRequest(t, full, engine.Request{Messages: msgs}, n)
}

// referenceRequest is referenceFile for a chat (req.Messages) or a raw
// completion (req.Prompt).
func referenceRequest(t *testing.T, full string, req engine.Request, n int) []int32 {
	t.Helper()
	m, err := engine.Load(context.Background(), full, engine.Options{Threads: 1, Slots: 1, Context: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	think := false
	res, err := m.Generate(context.Background(), engine.Request{Messages: req.Messages, Prompt: req.Prompt, MaxTokens: n, Think: &think,
		Sampling: engine.SamplerOptions{RepeatPenalty: penalty}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res.Tokens
}

var question = []engine.Message{{Role: "user", Content: "Explain pipeline parallelism in one sentence."}}

// penalty keeps random-weight models from repeating one token forever, so
// token equality over many steps means something. It is deterministic
// (greedy) and exercises the history the last stage keeps.
const penalty = 1.5

var greedy = engine.Sampling{RepeatPenalty: penalty}

func sameTokens(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPipelineMatchesSingleNode: 2, 3 and 4 stages on separate hosts give
// exactly the single-machine greedy tokens with f32 hidden states, for
// every architecture; fp16 agreement is measured. gemma3's tiny shape has
// six layers (the sixth global, the others over a sliding window): its cuts
// put global and windowed layers on different stages.
func TestPipelineMatchesSingleNode(t *testing.T) {
	splits4 := map[int][][2]int{2: {{0, 2}, {2, 4}}, 3: {{0, 1}, {1, 3}, {3, 4}}, 4: {{0, 1}, {1, 2}, {2, 3}, {3, 4}}}
	splits6 := map[int][][2]int{2: {{0, 3}, {3, 6}}, 3: {{0, 1}, {1, 5}, {5, 6}}, 4: {{0, 1}, {1, 3}, {3, 5}, {5, 6}}}
	const n = 24
	think := false
	for _, arch := range []string{"qwen3", "qwen2", "llama", "gemma3", "mistral3", "qwen3moe", "gptoss", "gemma2", "olmo3", "deepseek2", "glm4moelite", "llama4",
		"lfm2", "lfm2moe",
		"qwen3next",
		"nemotron_h",
		"nemotron_h_moe"} {
		splits := splits4
		if arch == "gemma3" {
			splits = splits6
		}
		want := reference(t, arch, question, n)
		distinct := map[int32]bool{}
		for _, w := range want {
			distinct[w] = true
		}
		if len(want) != n || len(distinct) < 4 {
			t.Fatalf("%s reference: %v: want %d varied tokens for a meaningful comparison", arch, want, n)
		}
		for stages := 2; stages <= 4; stages++ {
			t.Run(fmt.Sprintf("%s/%d-stage", arch, stages), func(t *testing.T) {
				origin := newStagePeer(t)
				var ps []*stagePeer
				for _, r := range splits[stages] {
					p := newStagePeer(t)
					p.serve(t, arch, r[0], r[1])
					ps = append(ps, p)
				}
				o := originatorFor(t, arch, origin, ps...)
				for _, dt := range []string{DTypeF32, DTypeF16} {
					res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, DType: dt, Sampling: greedy})
					if err != nil {
						t.Fatal(err)
					}
					if len(res.Hops) != stages {
						t.Fatalf("%d hops, want %d", len(res.Hops), stages)
					}
					agree := 0
					for i := range min(len(want), len(res.Tokens)) {
						if want[i] != res.Tokens[i] {
							break
						}
						agree++
					}
					if dt == DTypeF32 && !sameTokens(res.Tokens, want) {
						t.Fatalf("f32 pipeline tokens differ from single node:\n got %v\nwant %v", res.Tokens, want)
					}
					t.Logf("%s: %d/%d leading tokens agree with single node", dt, agree, len(want))
				}
			})
		}
	}
}

// TestFailoverToReplica: the middle stage dies mid-generation while another
// peer holds the same range; generation completes with the same tokens.
func TestFailoverToReplica(t *testing.T) {
	const arch, n = "qwen3", 32
	think := false
	want := reference(t, arch, question, n)
	origin := newStagePeer(t)
	a, mid, b, spare := newStagePeer(t), newStagePeer(t), newStagePeer(t), newStagePeer(t)
	a.serve(t, arch, 0, 1)
	mid.serve(t, arch, 1, 3)
	b.serve(t, arch, 3, 4)
	spare.serve(t, arch, 1, 3)
	o := originatorFor(t, arch, origin, a, mid, b, spare)
	var traces []answer.Trace
	var routeMid string
	killed, seen := false, 0
	res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, DType: DTypeF32,
		Sampling: greedy, OnTrace: func(ev answer.Trace) {
			traces = append(traces, ev)
			if ev.Kind == "route" {
				routeMid = ev.Route[1].Peer
			}
		},
		OnToken: func(string) {
			if seen++; seen == n/2 && !killed {
				killed = true
				// Kill whichever replica the route chose for [1,3).
				for _, p := range []*stagePeer{mid, spare} {
					if p.h.ID().String() == routeMid {
						p.h.Close()
					}
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if !sameTokens(res.Tokens, want) {
		t.Fatalf("tokens after failover differ:\n got %v\nwant %v", res.Tokens, want)
	}
	if len(res.Reroutes) != 1 || res.Reroutes[0].Failed != routeMid || res.Reroutes[0].Layers != [2]int{1, 3} {
		t.Fatalf("reroutes: %+v", res.Reroutes)
	}
	t.Logf("re-route at token %d cost %.1f ms (replayed %d tokens)", res.Reroutes[0].AtToken, res.Reroutes[0].CostMS, res.Reroutes[0].ReplayTokens)
}

// TestNoReplacementNamesLayers: with no other holder, a dead stage ends the
// generation with an error naming the uncovered layers; a gap is reported
// before starting.
func TestNoReplacementNamesLayers(t *testing.T) {
	const arch = "qwen3"
	think := false
	origin := newStagePeer(t)
	a, mid, b := newStagePeer(t), newStagePeer(t), newStagePeer(t)
	a.serve(t, arch, 0, 1)
	mid.serve(t, arch, 1, 3)
	b.serve(t, arch, 3, 4)
	o := originatorFor(t, arch, origin, a, mid, b)
	closed := false
	_, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: 16,
		OnToken: func(string) {
			if !closed {
				closed = true
				mid.h.Close()
			}
		}})
	var gap *GapError
	if !errors.As(err, &gap) || !strings.Contains(err.Error(), "[1,3)") {
		t.Fatalf("err = %v, want a GapError naming [1,3)", err)
	}
	// A gap from the start.
	o2 := originatorFor(t, arch, origin, a, b)
	_, err = o2.Generate(t.Context(), Request{Messages: question, MaxTokens: 4})
	if !errors.As(err, &gap) || !strings.Contains(err.Error(), "[1,3)") {
		t.Fatalf("err = %v, want a GapError naming [1,3)", err)
	}
}

// TestBadFramesRefused: a stage refuses frames of the wrong size, dtype or
// session with an error and keeps serving.
func TestBadFramesRefused(t *testing.T) {
	const arch = "qwen3"
	_, cid := model(t, arch)
	origin := newStagePeer(t)
	st := newStagePeer(t)
	st.serve(t, arch, 2, 4)
	origin.h.Peerstore().AddAddrs(st.h.ID(), st.h.Addrs(), time.Hour)
	o := &Originator{Host: origin.h}
	open := Open{Session: 7, Model: cid, Layers: 4, Hidden: 64, DType: DTypeF16,
		Route: []RouteHop{{Peer: st.h.ID().String(), Start: 0, End: 4}}}
	// The peer does not hold [0,4): refused naming it.
	_, err := o.openChain(t.Context(), open)
	var se *StageError
	if !errors.As(err, &se) || se.Code != CodeNoShard {
		t.Fatalf("open of unheld layers: %v", err)
	}
	// Open [2,4) directly (as a stage after another would).
	open.Route = []RouteHop{{Peer: "x", Start: 0, End: 2}, {Peer: st.h.ID().String(), Start: 2, End: 4}}
	open.Route[0].Peer = origin.h.ID().String()
	open.Index = 1
	s, err := origin.h.NewStream(t.Context(), st.h.ID(), ProtocolID)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := &chain{st: s, open: open, first: open.Route[1]}
	c.r = newReader(s)
	if err := writeJSON(s, frameOpen, &open); err != nil {
		t.Fatal(err)
	}
	if typ, _, err := readFrame(c.r, limitJSON); err != nil || typ != frameOpened {
		t.Fatalf("open: type %d, %v", typ, err)
	}
	hid := make([]byte, 2*64)
	cases := []struct {
		name string
		step Step
	}{
		{"wrong size", Step{Session: 7, Tokens: []int32{1}, DType: dtF16, Hidden: hid[:10]}},
		{"wrong dtype", Step{Session: 7, Tokens: []int32{1}, DType: dtF32, Hidden: make([]byte, 4*64)}},
		{"wrong session", Step{Session: 8, Tokens: []int32{1}, DType: dtF16, Hidden: hid}},
		{"wrong position", Step{Session: 7, Pos: 5, Tokens: []int32{1}, DType: dtF16, Hidden: hid}},
	}
	for _, tc := range cases {
		if err := writeFrame(s, frameStep, encodeStep(&tc.step)); err != nil {
			t.Fatal(err)
		}
		typ, body, err := readFrame(c.r, limitJSON)
		if err != nil || typ != frameError {
			t.Fatalf("%s: type %d, %v", tc.name, typ, err)
		}
		if !strings.Contains(string(body), CodeBadFrame) {
			t.Fatalf("%s: %s", tc.name, body)
		}
	}
	// Still serving: a correct step works.
	if err := writeFrame(s, frameStep, encodeStep(&Step{Session: 7, Tokens: []int32{1}, DType: dtF16, Hidden: hid})); err != nil {
		t.Fatal(err)
	}
	if typ, body, err := readFrame(c.r, limitResult); err != nil || typ != frameResult {
		t.Fatalf("good step after bad ones: type %d, %s, %v", typ, body, err)
	}
}

// TestCancelClosesEveryStage: cancelling the originator closes the session
// on every hop, not only the first.
func TestCancelClosesEveryStage(t *testing.T) {
	const arch = "qwen3"
	origin := newStagePeer(t)
	a, mid, b := newStagePeer(t), newStagePeer(t), newStagePeer(t)
	a.serve(t, arch, 0, 1)
	mid.serve(t, arch, 1, 3)
	b.serve(t, arch, 3, 4)
	o := originatorFor(t, arch, origin, a, mid, b)
	ctx, cancel := context.WithCancel(t.Context())
	busy := false
	_, err := o.Generate(ctx, Request{Messages: question, MaxTokens: 100000, OnToken: func(string) {
		if !busy {
			busy = true
			for _, p := range []*stagePeer{a, mid, b} {
				if active, _ := p.srv.Load(); active != 1 {
					t.Errorf("stage holds %d sessions during generation, want 1", active)
				}
			}
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range []*stagePeer{a, mid, b} {
		for {
			if active, _ := p.srv.Load(); active == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("a stage still holds the session after the originator cancelled")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestContextFullEndsLikeOneMachine: when a stage's context fills, the
// generation ends with done=length (as Generate does on one machine) and no
// healthy peer is routed around.
func TestContextFullEndsLikeOneMachine(t *testing.T) {
	const arch = "qwen3"
	full, cid := model(t, arch)
	origin := newStagePeer(t)
	a, b := newStagePeer(t), newStagePeer(t)
	for _, x := range []struct {
		p    *stagePeer
		s, e int
	}{{a, 0, 2}, {b, 2, 4}} {
		out := filepath.Join(t.TempDir(), "s.gguf")
		if _, err := shards.Slice(full, out, x.s, x.e); err != nil {
			t.Fatal(err)
		}
		sh, err := LoadShard(context.Background(), out, cid, x.s, x.e, engine.Options{Threads: 1, Slots: 2, Context: 96})
		if err != nil {
			t.Fatal(err)
		}
		x.p.srv.Add(sh)
	}
	o := originatorFor(t, arch, origin, a, b)
	res, err := o.Generate(t.Context(), Request{Messages: question, MaxTokens: 1000, Sampling: greedy})
	if err != nil {
		t.Fatal(err)
	}
	if res.Done != "length" || len(res.Reroutes) != 0 || res.PromptTokens+len(res.Tokens) != 97 {
		t.Fatalf("done %q after %d+%d tokens, %d re-routes", res.Done, res.PromptTokens, len(res.Tokens), len(res.Reroutes))
	}
}

// TestIdleSessionCloses: a session that completes no step loses its slot
// after the idle timeout, even while its peer keeps sending frames the
// stage refuses; completed steps keep a session open.
func TestIdleSessionCloses(t *testing.T) {
	const arch = "qwen3"
	_, cid := model(t, arch)
	origin := newStagePeer(t)
	st := newStagePeer(t)
	st.srv.IdleTimeout = 800 * time.Millisecond
	st.serve(t, arch, 2, 4)
	origin.h.Peerstore().AddAddrs(st.h.ID(), st.h.Addrs(), time.Hour)
	open := Open{Session: 7, Model: cid, Layers: 4, Hidden: 64, DType: DTypeF16, Index: 1,
		Route: []RouteHop{{Peer: origin.h.ID().String(), Start: 0, End: 2}, {Peer: st.h.ID().String(), Start: 2, End: 4}}}
	dial := func() (network.Stream, *bufio.Reader) {
		s, err := origin.h.NewStream(t.Context(), st.h.ID(), ProtocolID)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Reset() })
		r := newReader(s)
		if err := writeJSON(s, frameOpen, &open); err != nil {
			t.Fatal(err)
		}
		if typ, _, err := readFrame(r, limitJSON); err != nil || typ != frameOpened {
			t.Fatalf("open: type %d, %v", typ, err)
		}
		return s, r
	}
	hid := make([]byte, 2*64)
	// A live session: a completed step every 150 ms keeps it past the timeout.
	good, goodR := dial()
	for pos := range 8 {
		if err := writeFrame(good, frameStep, encodeStep(&Step{Session: 7, Pos: pos, Tokens: []int32{1}, DType: dtF16, Hidden: hid})); err != nil {
			t.Fatal(err)
		}
		if typ, _, err := readFrame(goodR, limitResult); err != nil || typ != frameResult {
			t.Fatalf("step %d of a live session: type %d, %v", pos, typ, err)
		}
		time.Sleep(150 * time.Millisecond)
	}
	good.Reset()
	// A squatter: only refused frames, for 4 s. Its session closes all the
	// same, at the timeout (were refused frames kept alive, after 4.8 s).
	bad, badR := dial()
	start := time.Now()
	for time.Since(start) < 4*time.Second {
		if err := writeFrame(bad, frameStep, encodeStep(&Step{Session: 7, Pos: 99, Tokens: []int32{1}, DType: dtF16, Hidden: hid})); err != nil {
			break // the stage closed the stream
		}
		if _, _, err := readFrame(badR, limitJSON); err != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if active, _ := st.srv.Load(); active == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a session sending only refused frames still holds its slot after %s", time.Since(start))
		}
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("idle session closed after %s (timeout 800 ms)", took)
	}
}

// arch is what p's record names: its build's, without the repacked
// kernels when it serves Q4 weights plainly.
func (p *stagePeer) arch() string {
	if p.plain {
		return runtime.GOARCH
	}
	return engine.ComputeArch()
}
