package node_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/moa"
	"github.com/llmswarm/llmswarm/node"
	"github.com/llmswarm/llmswarm/nodetest"
)

// scrape reads p's /metrics with the Prometheus text parser.
func scrape(t *testing.T, p *nodetest.Peer) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get("http://" + p.APIAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", res.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// value is the sample of family name whose labels include want (nil: the
// only one); -1 when there is none.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return -1
	}
next:
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// TestMetrics: /metrics parses as Prometheus text and counts what the
// peer did: questions by mode and outcome, tokens, answer times, the
// peers alive, a role's measured speed, sessions, memory and power; with
// libp2p's and Go's own metrics beside them.
func TestMetrics(t *testing.T) {
	model := q8Model(t)
	origin := nodetest.Start(t, nodetest.Config(t.TempDir()))
	cfg := nodetest.Config(t.TempDir())
	cfg.Bootstrap = []string{origin.Addr(t)}
	cfg.Engine = node.EngineConfig{Threads: 1, Context: 256}
	cfg.Roles = map[string]string{moa.Reasoner: model}
	r := nodetest.Start(t, cfg)
	nodetest.Eventually(t, 15*time.Second, "origin sees the role peer", func() bool {
		return nodetest.SeesAlive(origin, r.ID()) && len(origin.Swarm().View().ByRole(moa.Reasoner)) == 1
	})
	c := client.New(origin.APIAddr(), "")
	for range 2 {
		if _, err := c.Query(t.Context(), client.QueryRequest{Query: "What is the capital of France?", Mode: "speed", MaxTokens: 4}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Query(t.Context(), client.QueryRequest{Query: "hi", Mode: "writer", MaxTokens: 4}, nil); err == nil {
		t.Fatal("a role no peer serves answered")
	}
	fams := scrape(t, origin)
	for _, check := range []struct {
		name   string
		labels map[string]string
		ok     func(float64) bool
	}{
		{"swarm_requests_total", map[string]string{"mode": "speed", "outcome": "ok"}, func(v float64) bool { return v == 2 }},
		{"swarm_requests_total", map[string]string{"mode": "writer", "outcome": "no_agents"}, func(v float64) bool { return v == 1 }},
		{"swarm_request_seconds", map[string]string{"mode": "speed"}, func(v float64) bool { return v == 2 }},
		{"swarm_tokens_total", map[string]string{"kind": "generated"}, func(v float64) bool { return v >= 2 && v <= 8 }},
		{"swarm_tokens_total", map[string]string{"kind": "prompt"}, func(v float64) bool { return v > 0 }},
		{"swarm_peers", map[string]string{"state": "alive"}, func(v float64) bool { return v == 2 }},
		{"swarm_connections", nil, func(v float64) bool { return v >= 1 }},
		{"swarm_taking_work", nil, func(v float64) bool { return v == 1 }},
		{"swarm_banned_peers", nil, func(v float64) bool { return v == 0 }},
		{"go_goroutines", nil, func(v float64) bool { return v > 0 }},
	} {
		if v := value(fams, check.name, check.labels); !check.ok(v) {
			t.Errorf("%s%v = %v", check.name, check.labels, v)
		}
	}
	libp2p := 0
	for name := range fams {
		if strings.HasPrefix(name, "libp2p_") {
			libp2p++
		}
	}
	if libp2p == 0 {
		t.Error("no libp2p metrics beside the swarm's")
	}
	// The role peer's own metrics: its role's measured speed, sessions and
	// its memory budget.
	rf := scrape(t, r)
	if v := value(rf, "swarm_role_tokens_per_second", map[string]string{"role": moa.Reasoner}); v <= 0 {
		t.Errorf("role speed %v", v)
	}
	if v := value(rf, "swarm_sessions_capacity", nil); v <= 0 {
		t.Errorf("capacity %v", v)
	}
	if v := value(rf, "swarm_memory_used_bytes", nil); v <= 0 {
		t.Errorf("memory used %v", v)
	}
	if err := r.ReportPower(node.Power{BatteryPercent: 10}); err != nil {
		t.Fatal(err)
	}
	rf = scrape(t, r)
	if v, b := value(rf, "swarm_taking_work", nil), value(rf, "swarm_battery_percent", nil); v != 0 || b != 10 {
		t.Errorf("at 10%% battery: taking_work %v, battery %v", v, b)
	}
}

// TestMetricsBogusModes: a request's mode is the caller's text, so the
// mode label takes only known modes and one "invalid" bucket for the rest:
// bogus modes do not each grow a series.
func TestMetricsBogusModes(t *testing.T) {
	p := nodetest.Start(t, nodetest.Config(t.TempDir()))
	c := client.New(p.APIAddr(), "")
	for i := range 5 {
		mode := "bogus" + strconv.Itoa(i)
		if _, err := c.Query(t.Context(), client.QueryRequest{Query: "hi", Mode: mode, MaxTokens: 4}, nil); err == nil {
			t.Fatalf("mode %q answered", mode)
		}
	}
	fams := scrape(t, p)
	for _, name := range []string{"swarm_requests_total", "swarm_request_seconds"} {
		f := fams[name]
		if f == nil {
			t.Fatalf("no %s", name)
		}
		invalid := 0.0
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() != "mode" {
					continue
				}
				if v := l.GetValue(); v == "invalid" {
					invalid += value(map[string]*dto.MetricFamily{name: {Metric: []*dto.Metric{m}}}, name, nil)
				} else if !answer.IsMode(v) {
					t.Errorf("%s has a series for mode %q", name, v)
				}
			}
		}
		if invalid != 5 {
			t.Errorf("%s{mode=invalid} = %v, want 5", name, invalid)
		}
	}
}
