package mobile

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/internal/nettest"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

var modelDir string

func TestMain(m *testing.M) {
	// ollama logs every model load at info level through the default logger.
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	code := m.Run()
	if modelDir != "" {
		os.RemoveAll(modelDir)
	}
	if code == 0 {
		if err := goleak.Find(nettest.Libp2pWorkers()...); err != nil {
			os.Stderr.WriteString("goroutines left behind: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

var (
	modelOnce sync.Once
	modelPath string
)

// tinyModel is a tiny synthetic qwen3 with q8_0 weights, as the field runs.
func tinyModel(t testing.TB) string {
	t.Helper()
	modelOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mobile-test-")
		if err != nil {
			t.Fatal(err)
		}
		modelDir = dir
		p := filepath.Join(dir, "tiny-q8_0.gguf")
		if err := engine.Synth(context.Background(), p, engine.SynthSpec{Arch: "qwen3", Size: "tiny", Type: "q8_0", Seed: 12}); err != nil {
			t.Fatal(err)
		}
		modelPath = p
	})
	if modelPath == "" {
		t.Fatal("no synthetic model")
	}
	return modelPath
}

// rolePeer starts a real peer serving the reasoner role on the tiny model.
func rolePeer(t testing.TB) *nodetest.Peer {
	t.Helper()
	cfg := nodetest.Config(t.TempDir())
	cfg.API = "off"
	cfg.Roles = map[string]string{"reasoner": tinyModel(t)}
	cfg.Engine.Threads, cfg.Engine.Context = 1, 512
	return nodetest.Start(t, cfg)
}

// phoneJSON is a facade config for a loopback test peer.
func phoneJSON(t testing.TB, bootstrap ...string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"listen": []string{"/ip4/127.0.0.1/tcp/0"}, "bootstrap": bootstrap, "no_mdns": true,
		"nat": map[string]string{"port_mapping": "off"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func startPhone(t testing.TB, configJSON string, logger Logger) *Node {
	t.Helper()
	dir := t.TempDir()
	if err := nodetest.ShareKey(dir); err != nil { // a member of the test swarm
		t.Fatal(err)
	}
	m, err := Start(configJSON, dir, logger)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { m.Stop() })
	return m
}

// seesRole waits until m's Peers list id alive, serving role.
func seesRole(t testing.TB, m *Node, id, role string) {
	t.Helper()
	nodetest.Eventually(t, 30*time.Second, "the phone sees the "+role+" peer", func() bool {
		js, err := m.Peers()
		if err != nil {
			t.Fatal(err)
		}
		var ps client.Peers
		if err := json.Unmarshal([]byte(js), &ps); err != nil {
			t.Fatalf("peers JSON %s: %v", js, err)
		}
		for _, p := range ps.Peers {
			for _, r := range p.Roles {
				if p.PeerID == id && p.Alive && r.Role == role {
					return true
				}
			}
		}
		return false
	})
}

// recorder is an AskHandler that checks the contract: calls one at a
// time, exactly one end, nothing after it.
type recorder struct {
	t       testing.TB
	mu      sync.Mutex
	busy    bool
	tokens  []string
	events  map[string]int
	result  string
	kind    string
	message string
	ends    int
	onToken func(text string) error // runs inside OnToken, when set
}

func newRecorder(t testing.TB) *recorder { return &recorder{t: t, events: map[string]int{}} }

func (r *recorder) enter() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy {
		r.t.Error("handler called while a call was running")
	}
	if r.ends > 0 {
		r.t.Error("handler called after the request's end")
	}
	r.busy = true
}

func (r *recorder) leave() {
	r.mu.Lock()
	r.busy = false
	r.mu.Unlock()
}

func (r *recorder) OnToken(text string) error {
	r.enter()
	defer r.leave()
	r.mu.Lock()
	r.tokens = append(r.tokens, text)
	r.mu.Unlock()
	if r.onToken != nil {
		return r.onToken(text)
	}
	return nil
}

func (r *recorder) OnEvent(name, js string) error {
	r.enter()
	defer r.leave()
	if !json.Valid([]byte(js)) {
		r.t.Errorf("event %s: not JSON: %s", name, js)
	}
	r.mu.Lock()
	r.events[name]++
	r.mu.Unlock()
	return nil
}

func (r *recorder) OnDone(result string) error {
	r.enter()
	defer r.leave()
	r.mu.Lock()
	r.result, r.ends = result, r.ends+1
	r.mu.Unlock()
	return errors.New("an error after the end goes nowhere")
}

func (r *recorder) OnError(kind, message string) error {
	r.enter()
	defer r.leave()
	r.mu.Lock()
	r.kind, r.message, r.ends = kind, message, r.ends+1
	r.mu.Unlock()
	return errors.New("an error after the end goes nowhere")
}

// TestAskStreams: a phone asks a role peer; its tokens, concatenated, are
// the final answer; its power report reaches its own status and the other
// peer's view of it.
func TestAskStreams(t *testing.T) {
	role := rolePeer(t)
	phone := startPhone(t, phoneJSON(t, role.Addr(t)), nil)
	seesRole(t, phone, role.ID().String(), "reasoner")

	rec := newRecorder(t)
	req, err := phone.Ask(`{"query":"Tell me a story.","mode":"reasoner","max_tokens":24,"temperature":0}`, rec)
	if err != nil {
		t.Fatal(err)
	}
	req.WaitDone()
	req.Cancel() // after the end: nothing happens
	if rec.ends != 1 || rec.result == "" {
		t.Fatalf("ends %d, error %s %s", rec.ends, rec.kind, rec.message)
	}
	var res answer.Result
	if err := json.Unmarshal([]byte(rec.result), &res); err != nil {
		t.Fatalf("result %s: %v", rec.result, err)
	}
	if len(rec.tokens) < 2 || strings.Join(rec.tokens, "") != res.FinalAnswer {
		t.Fatalf("%d tokens %q; final answer %q", len(rec.tokens), strings.Join(rec.tokens, ""), res.FinalAnswer)
	}
	if len(res.AgentResponses) != 1 || res.AgentResponses[0].Peer != role.ID().String() || rec.events["agent"] != 1 {
		t.Fatalf("answered by %+v; events %v", res.AgentResponses, rec.events)
	}

	// A phone at 10%, not charging, takes no new work, and says so to
	// itself and to the swarm.
	if err := phone.ReportPower(10, false, "nominal"); err != nil {
		t.Fatal(err)
	}
	var st client.Status
	js, err := phone.Status()
	if err != nil || json.Unmarshal([]byte(js), &st) != nil {
		t.Fatalf("status %s: %v", js, err)
	}
	if st.Power.TakingWork || !strings.Contains(st.Power.Why, "battery at 10%") || !st.Power.Reported ||
		st.Power.Battery == nil || st.Power.Battery.Percent != 10 {
		t.Fatalf("power status after 10%%: %+v", st.Power)
	}
	var id client.ID
	js, err = phone.Identity()
	if err != nil || json.Unmarshal([]byte(js), &id) != nil || id.PeerID != st.PeerID {
		t.Fatalf("identity %s: %v", js, err)
	}
	nodetest.Eventually(t, 30*time.Second, "the role peer sees the phone at 10%", func() bool {
		ps, err := role.Peers()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps.Peers {
			if p.PeerID == id.PeerID && p.Battery != nil && p.Battery.Percent == 10 && !p.Battery.Charging {
				return true
			}
		}
		return false
	})
	if err := phone.ReportPower(80, true, "fair"); err != nil {
		t.Fatal(err)
	}
	if js, _ := phone.Status(); !strings.Contains(js, `"taking_work":true`) {
		t.Fatalf("status after a charger: %s", js)
	}
	for _, bad := range []struct {
		pct      int
		charging bool
		thermal  string
	}{{101, false, ""}, {-2, false, ""}, {50, false, "warm"}, {-1, true, ""}} {
		if err := phone.ReportPower(bad.pct, bad.charging, bad.thermal); err == nil {
			t.Errorf("ReportPower(%v) accepted", bad)
		}
	}
}

// TestCancelAndStop: Cancel ends a request as cancelled; Stop,
// called from inside a handler, ends the requests still running and
// leaves every method saying the node is stopped.
func TestCancelAndStop(t *testing.T) {
	role := rolePeer(t)
	phone := startPhone(t, phoneJSON(t, role.Addr(t)), nil)
	seesRole(t, phone, role.ID().String(), "reasoner")
	long := `{"query":"Tell me a long story.","mode":"reasoner","max_tokens":400,"temperature":0}`

	var req *Request
	ready := make(chan struct{})
	rec := newRecorder(t)
	rec.onToken = func(string) error { <-ready; req.Cancel(); return nil }
	req, err := phone.Ask(long, rec)
	if err != nil {
		t.Fatal(err)
	}
	close(ready)
	req.WaitDone()
	if rec.ends != 1 || rec.kind != "cancelled" || len(rec.tokens) == 0 || len(rec.tokens) >= 400 {
		t.Fatalf("cancelled: ends %d, %s %q, %d tokens", rec.ends, rec.kind, rec.message, len(rec.tokens))
	}

	stopped := make(chan error, 1)
	rec2 := newRecorder(t)
	var once sync.Once
	rec2.onToken = func(string) error { once.Do(func() { stopped <- phone.Stop() }); return nil }
	req2, err := phone.Ask(long, rec2)
	if err != nil {
		t.Fatal(err)
	}
	req2.WaitDone()
	if err := <-stopped; err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if rec2.ends != 1 || rec2.kind != "cancelled" {
		t.Fatalf("stopped mid-answer: ends %d, %s %q", rec2.ends, rec2.kind, rec2.message)
	}
	if err := phone.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := phone.Ask(long, newRecorder(t)); err == nil {
		t.Fatal("Ask after Stop accepted")
	}
	if _, err := phone.Status(); err == nil {
		t.Fatal("Status after Stop answered")
	}
	if err := phone.ReportPower(50, false, ""); err == nil || phone.APIAddr() != "off" {
		t.Fatal("ReportPower after Stop accepted")
	}
}

// TestHandlerError: a handler whose OnToken fails (a Java exception, come
// back as an error) cancels its request, is called no more but for the
// end, OnError("handler_error", ...), and the node goes on.
func TestHandlerError(t *testing.T) {
	role := rolePeer(t)
	phone := startPhone(t, phoneJSON(t, role.Addr(t)), nil)
	seesRole(t, phone, role.ID().String(), "reasoner")
	rec := newRecorder(t)
	rec.onToken = func(string) error { return errors.New("java.lang.RuntimeException: boom") }
	req, err := phone.Ask(`{"query":"Tell me a long story.","mode":"reasoner","max_tokens":400,"temperature":0}`, rec)
	if err != nil {
		t.Fatal(err)
	}
	req.WaitDone()
	if rec.ends != 1 || len(rec.tokens) != 1 || rec.kind != "handler_error" || !strings.Contains(rec.message, "boom") {
		t.Fatalf("ends %d, %d tokens, %s %q", rec.ends, len(rec.tokens), rec.kind, rec.message)
	}
	ok := newRecorder(t)
	req, err = phone.Ask(`{"query":"Tell me a story.","mode":"reasoner","max_tokens":8,"temperature":0}`, ok)
	if err != nil {
		t.Fatal(err)
	}
	req.WaitDone()
	if ok.ends != 1 || ok.result == "" {
		t.Fatalf("the next request: ends %d, %s %q", ok.ends, ok.kind, ok.message)
	}
}

// TestZeroValues: what gobind's public constructors make (a Node and a
// Request no Start or Ask made) refuses politely instead of crashing.
func TestZeroValues(t *testing.T) {
	var m Node
	if _, err := m.Status(); err == nil {
		t.Fatal("zero Node answered Status")
	}
	if _, err := m.Peers(); err == nil {
		t.Fatal("zero Node answered Peers")
	}
	if _, err := m.Identity(); err == nil {
		t.Fatal("zero Node answered Identity")
	}
	if _, err := m.Ask(`{"query":"hi"}`, newRecorder(t)); err == nil {
		t.Fatal("zero Node took a request")
	}
	if err := m.ReportPower(50, false, ""); err == nil {
		t.Fatal("zero Node took a power report")
	}
	if _, err := m.Invite(); err == nil {
		t.Fatal("zero Node gave an invitation")
	}
	if _, err := m.Join("swarm1-x"); err == nil {
		t.Fatal("zero Node joined")
	}
	if err := m.Stop(); err != nil || m.APIAddr() != "off" {
		t.Fatalf("zero Node: Stop %v, APIAddr %q", err, m.APIAddr())
	}
	var r Request
	r.Cancel()
	r.WaitDone()
}

// TestBadInput: bad configs and requests are refused at once, with an
// error that names the problem, and a handler is never called.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ config, dataDir, want string }{
		{`{"bogus":1}`, dir, `unknown field "bogus"`},
		{`{"listen":`, dir, "unexpected EOF"},
		{`{} {}`, dir, "trailing data"},
		{`[]`, dir, "cannot unmarshal array"},
		{`{"dht_mode":"sometimes"}`, dir, "dht_mode"},
		{`{"heartbeat":2}`, dir, "want a string with a unit"},
		{`{"power":{"min_battery":101}}`, dir, "power.min_battery"},
		{`{}`, "", "no data dir"},
	} {
		if m, err := Start(tc.config, tc.dataDir, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			if m != nil {
				m.Stop()
			}
			t.Errorf("Start(%s, %q): %v, want an error with %q", tc.config, tc.dataDir, err, tc.want)
		}
	}

	phone := startPhone(t, phoneJSON(t), nil)
	for _, tc := range []struct{ req, want string }{
		{``, "empty"},
		{`not json`, "not valid JSON"},
		{`{"query":"hi","bogus":true}`, `unknown field "bogus"`},
		{`{"query":"hi","max_tokens":"ten"}`, "field max_tokens"},
		{`{"query":"  "}`, "query is empty"},
		{`{"query":"hi","max_tokens":100000}`, "max_tokens"},
		{`{"query":"hi","temperature":3}`, "temperature"},
		{`{"query":"hi"} {"query":"again"}`, "after the JSON object"},
		{`["hi"]`, "want a JSON object"},
	} {
		rec := newRecorder(t)
		r, err := phone.Ask(tc.req, rec)
		if err == nil || !strings.Contains(err.Error(), tc.want) || r != nil {
			t.Errorf("Ask(%s): %v, want an error with %q", tc.req, err, tc.want)
		}
		if kind := answer.KindOf(err); kind != answer.BadRequest {
			t.Errorf("Ask(%s): error kind %s, want invalid_request_error", tc.req, kind)
		}
	}
	if _, err := phone.Ask(`{"query":"hi"}`, nil); err == nil {
		t.Error("Ask with no handler accepted")
	}

	// A query no peer can answer ends in OnError with the API's error type.
	rec := newRecorder(t)
	r, err := phone.Ask(`{"query":"hi","mode":"critic"}`, rec)
	if err != nil {
		t.Fatal(err)
	}
	r.WaitDone()
	if rec.ends != 1 || rec.kind != "no_agents" || rec.message == "" {
		t.Fatalf("no critic in the swarm: ends %d, %s %q", rec.ends, rec.kind, rec.message)
	}
}

// TestPhoneDefaults: the API is off and the DHT mode auto unless
// configured; a configured API is kept. (Listening addresses, mDNS and
// port mapping are set: a test stays on loopback.)
func TestPhoneDefaults(t *testing.T) {
	phone := startPhone(t, phoneJSON(t), nil)
	if a := phone.APIAddr(); a != "off" {
		t.Fatalf("API on a phone by default: %s", a)
	}
	var st client.Status
	js, _ := phone.Status()
	if err := json.Unmarshal([]byte(js), &st); err != nil || st.DHTMode != "auto" {
		t.Fatalf("status %s: %v", js, err)
	}
	on := startPhone(t, `{"api":"127.0.0.1:0","listen":["/ip4/127.0.0.1/tcp/0"],"no_mdns":true,"nat":{"port_mapping":"off"}}`, nil)
	if a := on.APIAddr(); a == "off" || !strings.HasPrefix(a, "127.0.0.1:") {
		t.Fatalf("configured API: %q", a)
	}
	if !strings.HasPrefix(Version(), node.Version+" (") {
		t.Fatalf("Version %q", Version())
	}
}
