package moa

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

var (
	modelsMu sync.Mutex
	models   = map[string]string{}
	modelDir string
)

// synthModel writes one synthetic qwen3 of a size and type per test binary.
func synthModel(t testing.TB, size, typ string) string {
	t.Helper()
	modelsMu.Lock()
	defer modelsMu.Unlock()
	key := size + "-" + typ
	if p, ok := models[key]; ok {
		return p
	}
	if modelDir == "" {
		d, err := os.MkdirTemp("", "moa-test")
		if err != nil {
			t.Fatal(err)
		}
		modelDir = d
	}
	p := filepath.Join(modelDir, key+".gguf")
	if err := engine.Synth(context.Background(), p, engine.SynthSpec{Arch: "qwen3", Size: size, Type: typ, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	models[key] = p
	return p
}

// tinyModel is the tiny f32 model most tests use.
func tinyModel(t *testing.T) string { return synthModel(t, "tiny", "f32") }

// smallModel (8 layers, hidden 256) is slow enough that a deadline cuts
// its answers.
func smallModel(t *testing.T) string { return synthModel(t, "small", "q8_0") }

// testPeer is a libp2p host with a MoA server.
type testPeer struct {
	h   host.Host
	srv *Server
}

func newTestPeer(t *testing.T, slots int, roles ...string) *testPeer {
	t.Helper()
	return newTestPeerWith(t, tinyModel, slots, roles...)
}

// newTestPeerWith serves roles with the model that file gives.
func newTestPeerWith(t *testing.T, file func(*testing.T) string, slots int, roles ...string) *testPeer {
	t.Helper()
	return newRolePeer(t, file, engine.Options{Threads: 1, Slots: slots, Context: 2048}, roles...)
}

// newRolePeer serves roles with the model that file gives, loaded with opts.
func newRolePeer(t *testing.T, file func(*testing.T) string, opts engine.Options, roles ...string) *testPeer {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	p := &testPeer{h: h, srv: NewServer(h, nil)}
	t.Cleanup(func() { p.srv.Close(); h.Close() })
	for _, r := range roles {
		rm, err := LoadRole(t.Context(), r, file(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		p.srv.Add(rm)
	}
	return p
}

// viewOf builds the originator's view of the given peers, as gossip
// would, with a ledger in which this peer verified their role models
// (these tests are not about trust; trust_test.go's and vet_test.go's
// are).
func viewOf(self *testPeer, peers ...*testPeer) *swarm.View {
	tr := swarm.NewTrust()
	for _, p := range peers {
		verifyRoles(tr, p)
	}
	return viewTrusting(tr, self, peers...)
}

// verifyRoles records p's role models as verified in tr.
func verifyRoles(tr *swarm.Trust, p *testPeer) {
	for _, r := range p.srv.Roles() {
		tr.Pass(p.h.ID(), swarm.RoleClaim(r.ModelCID))
	}
}

// viewTrusting is viewOf with tr as the view's ledger (nil: none).
func viewTrusting(tr *swarm.Trust, self *testPeer, peers ...*testPeer) *swarm.View {
	v := swarm.NewView(self.h.ID(), swarm.Liveness{}, swarm.WithTrust(tr))
	for i, p := range append([]*testPeer{self}, peers...) {
		self.h.Peerstore().AddAddrs(p.h.ID(), p.h.Addrs(), time.Hour)
		active, capacity := p.srv.Load()
		v.Observe(&gossip.Capability{PeerID: p.h.ID().String(), Seq: uint64(i + 1), Roles: p.srv.Roles(),
			Load: gossip.Load{Active: active, Capacity: capacity}}, time.Now())
	}
	return v
}

func TestAskFanOutAndAggregate(t *testing.T) {
	origin := newTestPeer(t, 4)
	b := newTestPeer(t, 4, Reasoner, Concise)
	c := newTestPeer(t, 4, Aggregator)
	o := &Originator{Host: origin.h, View: viewOf(origin, b, c)}
	var streamed strings.Builder
	var agents []answer.Agent
	res, err := o.Ask(t.Context(), Query{Prompt: "What is the capital of France?", MaxTokens: 8,
		OnToken: func(s string) { streamed.WriteString(s) }, OnAgent: func(a answer.Agent) { agents = append(agents, a) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.QueryType != string(SimpleFact) || res.Classifier != "rules" || res.AgentsResponded != 2 {
		t.Fatalf("result: type %s by %s, %d agents", res.QueryType, res.Classifier, res.AgentsResponded)
	}
	for _, a := range res.AgentResponses {
		if a.Peer != b.h.ID().String() || a.Tokens == 0 || a.Content == "" || a.Model == "" {
			t.Fatalf("agent response: %+v", a)
		}
	}
	if res.Aggregator == nil || res.Aggregator.Peer != c.h.ID().String() || res.Aggregator.Error != "" {
		t.Fatalf("aggregator: %+v", res.Aggregator)
	}
	// A random-weight aggregator may end at once; then the best agent's
	// answer is the final one.
	want := res.Aggregator.Content
	if strings.TrimSpace(want) == "" {
		want = res.AgentResponses[0].Content
		if res.AgentResponses[1].Weight > res.AgentResponses[0].Weight {
			want = res.AgentResponses[1].Content
		}
	}
	if res.FinalAnswer != want || streamed.String() != res.FinalAnswer {
		t.Fatalf("final %q, aggregator %q, streamed %q", res.FinalAnswer, res.Aggregator.Content, streamed.String())
	}
	if len(agents) != 2 {
		t.Fatalf("OnAgent called %d times, want 2", len(agents))
	}
}

func TestAskWithoutAggregatorPicksBestAndSingleIsDirect(t *testing.T) {
	origin := newTestPeer(t, 4)
	b := newTestPeer(t, 4, Reasoner)
	o := &Originator{Host: origin.h, View: viewOf(origin, b)}
	res, err := o.Ask(t.Context(), Query{Prompt: "What is the capital of France?", MaxTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	if res.AgentsResponded != 1 || res.FinalAnswer != res.AgentResponses[0].Content || res.Aggregator != nil {
		t.Fatalf("single responder: %+v", res)
	}
}

func TestAskLocalRoles(t *testing.T) {
	origin := newTestPeer(t, 4, Reasoner, Concise)
	o := &Originator{Host: origin.h, View: viewOf(origin), Local: origin.srv}
	res, err := o.Ask(t.Context(), Query{Prompt: "Who wrote Hamlet?", MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.AgentsResponded != 2 {
		t.Fatalf("local roles: %d responded", res.AgentsResponded)
	}
}

func TestAskNoAgents(t *testing.T) {
	origin := newTestPeer(t, 4)
	o := &Originator{Host: origin.h, View: viewOf(origin)}
	_, err := o.Ask(t.Context(), Query{Prompt: "Who wrote Hamlet?"})
	if !errors.Is(err, ErrNoAgents) || !strings.Contains(err.Error(), "reasoner") {
		t.Fatalf("err = %v, want ErrNoAgents naming the roles", err)
	}
	if _, err := o.Ask(t.Context(), Query{Prompt: "  "}); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("empty prompt: err = %v", err)
	}
}

func TestDeadPeerLeftOut(t *testing.T) {
	origin := newTestPeer(t, 4)
	b := newTestPeer(t, 4, Reasoner)
	c := newTestPeer(t, 4, Concise)
	v := viewOf(origin, b, c)
	c.h.Close() // gone, but the view still lists it
	o := &Originator{Host: origin.h, View: v}
	res, err := o.Ask(t.Context(), Query{Prompt: "Who wrote Hamlet?", MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	if res.AgentsResponded != 1 || len(res.FailedAgents) != 1 || res.FailedAgents[0].Role != Concise {
		t.Fatalf("responded %d, failed %+v", res.AgentsResponded, res.FailedAgents)
	}
	// Every agent gone: a clear error naming each failure.
	b.h.Close()
	_, err = o.Ask(t.Context(), Query{Prompt: "Who wrote Hamlet?", MaxTokens: 4})
	var nr *NoResponseError
	if !errors.As(err, &nr) || len(nr.Failed) != 2 {
		t.Fatalf("err = %v, want NoResponseError for 2 agents", err)
	}
}

// TestDeadlineKeepsPartialAnswers: agents asked for far more tokens than
// the user's deadline allows answer with what they wrote by then, labelled
// partial, and the serving side stops generating.
func TestDeadlineKeepsPartialAnswers(t *testing.T) {
	origin := newTestPeer(t, 4)
	b := newTestPeerWith(t, smallModel, 4, Reasoner, Concise)
	// 3 s: under a loaded CI machine the two prompts alone took 0.9 s
	// before a first token; 8000 tokens still cannot fit.
	o := &Originator{Host: origin.h, View: viewOf(origin, b), Timeouts: Timeouts{Simple: 3 * time.Second}}
	start := time.Now()
	res, err := o.Ask(t.Context(), Query{Prompt: "Who wrote Hamlet?", MaxTokens: 8000, Sampling: engine.Sampling{RepeatPenalty: 1.3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.AgentResponses) != 2 {
		t.Fatalf("responses %+v, failed %+v", res.AgentResponses, res.FailedAgents)
	}
	partial := 0
	for _, a := range res.AgentResponses {
		if a.Partial {
			partial++
			if a.PartialReason == "" || strings.TrimSpace(a.Content) == "" {
				t.Fatalf("%s: partial (%q) with %d bytes: want a labelled, non-empty partial answer", a.Role, a.PartialReason, len(a.Content))
			}
		}
	}
	if partial == 0 {
		t.Fatalf("8000 tokens in 3 s, and no answer is partial: %+v", res.AgentResponses)
	}
	if strings.TrimSpace(res.FinalAnswer) == "" {
		t.Fatal("empty final answer from two partial answers")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a 3 s deadline answered after %s", took)
	}
	// The serving side stops generating at its deadline.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if active, _ := b.srv.Load(); active == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server still generating %s after the deadline", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOverCapacityQueues: a request over the peer's slots waits in its
// queue and is answered when a slot frees; one over the queue's limit is
// refused at once as busy.
func TestOverCapacityQueues(t *testing.T) {
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	b := &testPeer{h: h, srv: NewServer(h, nil)}
	t.Cleanup(func() { b.srv.Close(); h.Close() })
	rm, err := LoadRole(t.Context(), Reasoner, tinyModel(t), engine.Options{Threads: 1, Slots: 1, Queue: 1, Context: 2048})
	if err != nil {
		t.Fatal(err)
	}
	b.srv.Add(rm)
	origin := newTestPeer(t, 4)
	origin.h.Peerstore().AddAddrs(b.h.ID(), b.h.Addrs(), time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	started := make(chan struct{})
	go Call(ctx, origin.h, b.h.ID(), &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "go on"}}, MaxTokens: 4000},
		func(string, string) {
			select {
			case <-started:
			default:
				close(started)
			}
		})
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("first request produced no token")
	}
	queued := make(chan error, 1)
	go func() {
		_, err := Call(t.Context(), origin.h, b.h.ID(), &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "me too"}}, MaxTokens: 4}, nil)
		queued <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); rm.Model.Queue().Waiting != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second request never queued")
		}
	}
	// From another peer: the first is within its share, so the request
	// reaches the model, whose queue is full.
	other := newTestPeer(t, 1)
	other.h.Peerstore().AddAddrs(b.h.ID(), b.h.Addrs(), time.Hour)
	_, err = Call(t.Context(), other.h, b.h.ID(), &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "and me"}}}, nil)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("third request with the queue full: err = %v, want ErrBusy", err)
	}
	cancel() // the first request's originator leaves: its slot frees
	select {
	case err := <-queued:
		if err != nil {
			t.Fatalf("queued request: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the queued request was never served")
	}
	if q := rm.Model.Queue(); q.Waited != 1 || q.WaitTime <= 0 || q.Waiting != 0 {
		t.Fatalf("queue stats %+v: want one request that waited", q)
	}
	_, err = Call(t.Context(), origin.h, b.h.ID(), &Request{Role: Writer, Messages: []Message{{Role: "user", Content: "x"}}}, nil)
	if !errors.Is(err, ErrNoRole) {
		t.Fatalf("unserved role: err = %v, want ErrNoRole", err)
	}
}

// Speed mode on one peer serving both the drafter and the reasoner with
// one model: the reasoner answers, drafted by its own peer's drafter (no
// network between them), and the answer is the reasoner's.
func TestSpeedMode(t *testing.T) {
	origin := newTestPeer(t, 4)
	b := newTestPeer(t, 4, Drafter, Reasoner)
	b.srv.DraftMin = 2 // on loopback, drafting by cost would soon stop
	o := &Originator{Host: origin.h, View: viewOf(origin, b)}
	q := Query{Prompt: "What is 2+2?", Mode: ModeSpeed, MaxTokens: 12}
	res, streamed := askDrafted(t, o, q)
	if res.AgentsResponded != 1 || res.AgentResponses[0].Role != Reasoner {
		t.Fatalf("speed mode agents: %+v", res.AgentResponses)
	}
	a := res.AgentResponses[0]
	if d := a.Draft; d == nil || d.Peer != b.h.ID().String() || d.Rounds == 0 || d.Accepted == 0 || d.Error != "" {
		t.Fatalf("draft %+v", d)
	}
	if want := plainReasoner(t, o, b, q); res.FinalAnswer != want || streamed != want {
		t.Fatalf("final %q, streamed %q, the reasoner alone %q", res.FinalAnswer, streamed, want)
	}
}

func TestSpotterAnswerIsParsedStrictly(t *testing.T) {
	origin := newTestPeer(t, 4)
	b := newTestPeer(t, 4, Spotter, Reasoner)
	o := &Originator{Host: origin.h, View: viewOf(origin, b)}
	res, err := o.Ask(t.Context(), Query{Prompt: "What is 17 * 23?", MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	// A random-weight spotter does not answer with a category: the rules decide.
	if res.Classifier != "rules" || res.QueryType != string(Math) {
		t.Fatalf("classified %s by %s", res.QueryType, res.Classifier)
	}
}

func TestMain(m *testing.M) {
	// ollama logs every model load at info level through the default logger.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	code := m.Run()
	if modelDir != "" {
		os.RemoveAll(modelDir)
	}
	os.Exit(code)
}

// TestRolesShareOneModel: one file serving two roles is loaded once; its
// slots are counted once, and both roles answer.
func TestRolesShareOneModel(t *testing.T) {
	p := newTestPeer(t, 2, Reasoner)
	rm := p.srv.roles[Reasoner]
	critic, err := rm.As(Critic)
	if err != nil {
		t.Fatal(err)
	}
	p.srv.Add(critic)
	if _, capacity := p.srv.Load(); capacity != 2 {
		t.Fatalf("capacity %d, want the shared model's 2 slots", capacity)
	}
	for _, role := range []string{Reasoner, Critic} {
		if _, err := p.srv.Serve(t.Context(), &Request{Role: role, Messages: []Message{{Role: "user", Content: "hi"}}, MaxTokens: 2}, nil); err != nil {
			t.Fatalf("%s: %v", role, err)
		}
	}
	if _, err := rm.As("poet"); err == nil {
		t.Fatal("unknown role accepted")
	}
}

// TestOnePeerCannotTakeARole: one originator's requests beyond its share
// of a role's slots and queue wait in its own line at the role peer, and
// beyond that line are refused as busy, while another peer's request still
// queues at the model and is answered.
func TestOnePeerCannotTakeARole(t *testing.T) {
	b := newRolePeer(t, tinyModel, engine.Options{Threads: 1, Slots: 1, Queue: 7, Context: 2048}, Reasoner) // share: max(2, 8/4) = 2, line: 7
	greedy, other := newTestPeer(t, 4), newTestPeer(t, 4)
	for _, p := range []*testPeer{greedy, other} {
		p.h.Peerstore().AddAddrs(b.h.ID(), b.h.Addrs(), time.Hour)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	long := &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "go on"}}, MaxTokens: 4000}
	started := make(chan struct{}, 2)
	for range 2 { // the greedy peer's share: one answering, one queued
		go Call(ctx, greedy.h, b.h.ID(), long, func(string, string) {
			select {
			case started <- struct{}{}:
			default:
			}
		})
	}
	rm := b.srv.roles[Reasoner]
	for deadline := time.Now().Add(20 * time.Second); rm.Model.Queue().Waiting != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the greedy peer's second request never queued")
		}
	}
	short := &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "hi"}}, MaxTokens: 2}
	for range 7 { // its line: waiting for one of its own, not at the model
		go Call(ctx, greedy.h, b.h.ID(), short, nil)
	}
	waiting := func() int {
		b.srv.inflight.mu.Lock()
		defer b.srv.inflight.mu.Unlock()
		return b.srv.inflight.waiting[peerRole{greedy.h.ID(), Reasoner}]
	}
	for deadline := time.Now().Add(20 * time.Second); waiting() != 7; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the greedy peer's requests wait in its line, want 7", waiting())
		}
	}
	if _, err := Call(t.Context(), greedy.h, b.h.ID(), short, nil); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "per peer") {
		t.Fatalf("a request from the same peer with its line full: %v, want busy (per-peer share)", err)
	}
	if w := rm.Model.Queue().Waiting; w != 1 {
		t.Fatalf("%d requests wait at the model, want 1: the greedy peer's line must not reach it", w)
	}
	answered := make(chan error, 1)
	go func() {
		_, err := Call(t.Context(), other.h, b.h.ID(), short, nil)
		answered <- err
	}()
	for deadline := time.Now().Add(20 * time.Second); rm.Model.Queue().Waiting != 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("another peer's request did not queue")
		}
	}
	cancel() // the greedy peer leaves: its slot frees, the other peer is served
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("another peer's request: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("another peer's request was never answered")
	}
}

// TestOnePeerManyRequestsQueue: many concurrent requests from one peer for
// one role, more than its share of slots and queue, wait their turn and are
// all answered, none refused as busy.
func TestOnePeerManyRequestsQueue(t *testing.T) {
	b := newRolePeer(t, tinyModel, engine.Options{Threads: 1, Slots: 2, Queue: 16, Context: 2048}, Reasoner) // share 4, line 16
	a := newTestPeer(t, 1)
	a.h.Peerstore().AddAddrs(b.h.ID(), b.h.Addrs(), time.Hour)
	req := &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "hi"}}, MaxTokens: 2}
	const n = 20
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := Call(t.Context(), a.h, b.h.ID(), req, nil)
			errs <- err
		}()
	}
	failed := 0
	for range n {
		if err := <-errs; err != nil {
			failed++
			t.Log(err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d concurrent requests from one peer failed, want all answered", failed, n)
	}
}

// TestOriginatorManyQuestionsOneRolePeer: 50 concurrent questions from one
// originator for a role only one peer serves, far more than the streams
// one peer may open to another and than the role peer lets one peer hold
// and line up, wait their turn and are all answered.
func TestOriginatorManyQuestionsOneRolePeer(t *testing.T) {
	b := newRolePeer(t, tinyModel, engine.Options{Threads: 1, Slots: 2, Queue: 16, Context: 2048}, Reasoner) // share 4, line 16
	origin := newTestPeer(t, 1)
	// Not a test of hang detection: on a machine loaded by other work the
	// busy role peer's pongs can be later than the default half second,
	// which would call it hung.
	o := &Originator{Host: origin.h, View: viewOf(origin, b), Progress: swarm.Progress{ProbeTimeout: 10 * time.Second}}
	const n = 50
	errs := make(chan error, n)
	for range n {
		go func() {
			res, err := o.Ask(t.Context(), Query{Prompt: "hi", MaxTokens: 2})
			if err == nil && res.AgentsResponded != 1 {
				err = fmt.Errorf("%d agents responded: %+v", res.AgentsResponded, res.FailedAgents)
			}
			errs <- err
		}()
	}
	failed := 0
	for range n {
		if err := <-errs; err != nil {
			failed++
			t.Log(err)
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d concurrent questions to one role peer failed, want all answered", failed, n)
	}
}
