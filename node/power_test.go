package node_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// capacityIn is the capacity p's view shows for id (-1: not seen).
func capacityIn(p *nodetest.Peer, id peer.ID) int {
	for _, q := range p.Swarm().View().Peers() {
		if q.ID == id {
			return q.Cap.Load.Capacity
		}
	}
	return -1
}

// TestLowBatteryPeerGetsNoNewWork: a phone told it is at 10% battery, not
// charging, says so in its record (capacity 0, the battery in it), and
// gets no new MoA question and no pipeline stage, which go to a peer on
// power; asked directly anyway, it answers busy and says why. With the
// other peer gone, the originator's error names the phone and its
// battery. On a charger it takes work again.
func TestLowBatteryPeerGetsNoNewWork(t *testing.T) {
	model := q8Model(t)
	origin := nodetest.Start(t, nodetest.Config(t.TempDir()))
	start := func() *nodetest.Peer {
		cfg := nodetest.Config(t.TempDir())
		cfg.Bootstrap = []string{origin.Addr(t)}
		cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
		cfg.Roles = map[string]string{moa.Reasoner: model}
		cfg.Shards = []string{model + ":0-4"}
		cfg.Heartbeat = node.Duration(300 * time.Millisecond)
		return nodetest.Start(t, cfg)
	}
	phone, pi := start(), start()
	nodetest.Eventually(t, 15*time.Second, "origin sees both holders", func() bool {
		return nodetest.SeesShards(origin, phone.ID(), pi.ID()) && len(origin.Swarm().View().ByRole(moa.Reasoner)) == 2
	})
	if err := phone.ReportPower(node.Power{BatteryPercent: 10, Thermal: "nominal"}); err != nil {
		t.Fatal(err)
	}
	st, err := phone.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Power.TakingWork || !strings.Contains(st.Power.Why, "battery at 10% and not charging") || !st.Power.Reported ||
		!strings.Contains(strings.Join(st.Warnings, "\n"), "not taking new work") {
		t.Fatalf("phone status %+v, warnings %q: want not taking work, for its battery", st.Power, st.Warnings)
	}
	nodetest.Eventually(t, 10*time.Second, "origin sees the phone's record say it takes no work", func() bool {
		return capacityIn(origin, phone.ID()) == 0
	})
	for _, p := range origin.Swarm().View().Peers() {
		if p.ID == phone.ID() && (p.Cap.Battery == nil || p.Cap.Battery.Percent != 10 || p.Cap.Battery.Charging) {
			t.Fatalf("phone's record carries battery %+v, want 10%% not charging", p.Cap.Battery)
		}
	}

	c := client.New(origin.APIAddr(), "")
	for range 3 {
		res, err := c.Query(t.Context(), client.QueryRequest{Query: "What is the capital of France?", Mode: "speed", MaxTokens: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.AgentResponses) != 1 || res.AgentResponses[0].Peer != pi.ID().String() {
			t.Fatalf("answered by %+v, want the peer on power", res.AgentResponses)
		}
		res, err = c.Query(t.Context(), client.QueryRequest{Query: "Tell me about the swarm.", Mode: "pipeline", MaxTokens: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		rt := res
		if rt.Pipeline == nil {
			t.Fatalf("pipeline answer without its pipeline: %+v", rt)
		}
		for _, h := range rt.Pipeline.Hops {
			if h.Peer == phone.ID().String() {
				t.Fatalf("route %+v goes through the phone at 10%%", rt.Pipeline.Hops)
			}
		}
	}
	// An originator that ignores the record (an older peer, or one that
	// raced the heartbeat) is answered busy, with the reason.
	_, err = moa.Call(t.Context(), origin.Host(), phone.ID(), &moa.Request{Role: moa.Reasoner,
		Messages: []moa.Message{{Role: "user", Content: "hi"}}, MaxTokens: 2}, nil)
	if !errors.Is(err, moa.ErrBusy) || !strings.Contains(err.Error(), "battery at 10%") {
		t.Fatalf("direct question to the phone: %v, want busy for its battery", err)
	}

	piID := pi.ID()
	pi.Close()
	nodetest.Eventually(t, 15*time.Second, "origin sees the peer on power gone", func() bool {
		return !origin.Swarm().View().Alive(piID)
	})
	_, err = c.Query(t.Context(), client.QueryRequest{Query: "Tell me about the swarm.", Mode: "pipeline", MaxTokens: 4}, nil)
	if err == nil || !strings.Contains(err.Error(), "takes no new work: battery 10%, not charging") {
		t.Fatalf("pipeline with only the phone left: %v, want an error naming its battery", err)
	}

	if err := phone.ReportPower(node.Power{BatteryPercent: 11, Charging: true}); err != nil {
		t.Fatal(err)
	}
	nodetest.Eventually(t, 10*time.Second, "origin sees the phone take work again", func() bool {
		return capacityIn(origin, phone.ID()) > 0
	})
	res, err := c.Query(t.Context(), client.QueryRequest{Query: "What is the capital of France?", Mode: "speed", MaxTokens: 4}, nil)
	if err != nil || len(res.AgentResponses) != 1 || res.AgentResponses[0].Peer != phone.ID().String() {
		t.Fatalf("on a charger: %v %+v, want the phone to answer", err, res)
	}
}

// TestPeerOnPowerPreferred: of two equally fast holders of a role, the one
// on a charger answers, not the one draining its battery (still above
// the level where it stops taking work).
func TestPeerOnPowerPreferred(t *testing.T) {
	model := q8Model(t)
	origin := nodetest.Start(t, nodetest.Config(t.TempDir()))
	start := func() *nodetest.Peer {
		cfg := nodetest.Config(t.TempDir())
		cfg.Bootstrap = []string{origin.Addr(t)}
		cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
		cfg.Roles = map[string]string{moa.Reasoner: model}
		return nodetest.Start(t, cfg)
	}
	onBattery, onPower := start(), start()
	if err := onBattery.ReportPower(node.Power{BatteryPercent: 80}); err != nil {
		t.Fatal(err)
	}
	if err := onPower.ReportPower(node.Power{BatteryPercent: 40, Charging: true}); err != nil {
		t.Fatal(err)
	}
	nodetest.Eventually(t, 15*time.Second, "origin sees both with their batteries", func() bool {
		n := 0
		for _, p := range origin.Swarm().View().Peers() {
			if p.Alive && p.Cap.Battery != nil && len(p.Cap.Roles) == 1 {
				n++
			}
		}
		return n == 2
	})
	c := client.New(origin.APIAddr(), "")
	for range 4 {
		res, err := c.Query(t.Context(), client.QueryRequest{Query: "Name a colour.", Mode: "speed", MaxTokens: 4}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.AgentResponses) != 1 || res.AgentResponses[0].Peer != onPower.ID().String() {
			t.Fatalf("answered by %+v, want the peer on a charger", res.AgentResponses)
		}
	}
}

func TestReportPowerRefusesBadInput(t *testing.T) {
	n := &node.Node{}
	for _, p := range []node.Power{{BatteryPercent: 101}, {BatteryPercent: -2}, {BatteryPercent: 50, Thermal: "toasty"},
		{BatteryPercent: -1, Charging: true}} {
		if err := n.ReportPower(p); err == nil || !strings.Contains(err.Error(), "power:") {
			t.Errorf("ReportPower(%+v): %v, want an error naming the field", p, err)
		}
	}
	for _, c := range []node.PowerConfig{{MinBattery: 101}, {MinBattery: -3}, {PauseThermal: "hot"}} {
		cfg := node.Config{DataDir: t.TempDir(), Power: c}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "power.") {
			t.Errorf("config power %+v: %v, want an error naming the key", c, err)
		}
	}
}
