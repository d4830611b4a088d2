package node

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmswarm/llmswarm/answer"
)

// metrics are this peer's Prometheus metrics (GET /metrics): counters the
// answers bump as they end, and gauges read from the peer when scraped.
// libp2p's own metrics (connections, streams, resource manager, identify,
// hole punching, relay) and Go's runtime are served beside them from the
// process's default registry.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec   // by mode and outcome
	tokens    *prometheus.CounterVec   // by kind: prompt or generated
	seconds   *prometheus.HistogramVec // by mode
	failovers prometheus.Counter
	checked   prometheus.Counter // spot-checked pipeline steps
	mismatch  prometheus.Counter // spot-check mismatches
	lost      prometheus.Counter // steps of checked answers nobody compared
}

func newMetrics(n *Node) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarm_requests_total",
		Help: "Questions answered through this peer's API, by mode and outcome (ok, or the API's error type)."},
		[]string{"mode", "outcome"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "swarm_tokens_total",
		Help: "Tokens of the questions answered: prompt, or generated in the answer."}, []string{"kind"})
	m.seconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "swarm_request_seconds",
		Help:    "Time to answer a question, by mode.",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}}, []string{"mode"})
	m.failovers = prometheus.NewCounter(prometheus.CounterOpts{Name: "swarm_pipeline_failovers_total",
		Help: "Pipeline re-routes: a stage failed, hung or lied and the generation went on on another route."})
	m.checked = prometheus.NewCounter(prometheus.CounterOpts{Name: "swarm_pipeline_spot_checked_steps_total",
		Help: "Pipeline steps whose logits a second route confirmed."})
	m.mismatch = prometheus.NewCounter(prometheus.CounterOpts{Name: "swarm_pipeline_spot_check_mismatches_total",
		Help: "Pipeline steps where two routes disagreed."})
	m.lost = prometheus.NewCounter(prometheus.CounterOpts{Name: "swarm_pipeline_check_lost_steps_total",
		Help: "Steps of pipeline answers drawn for a spot check that no second route compared (its check route failed, or none could be had)."})
	m.reg.MustRegister(m.requests, m.tokens, m.seconds, m.failovers, m.checked, m.mismatch, m.lost, &gauges{n: n})
	return m
}

// answered counts one question's end.
func (m *metrics) answered(mode string, out *outcome, err error, took time.Duration) {
	if m == nil {
		return
	}
	// The mode comes from the request: a label per bogus mode would grow
	// the series without bound, so anything not a known mode is one bucket.
	switch {
	case mode == "":
		mode = "auto"
	case !answer.IsMode(mode):
		mode = "invalid"
	}
	outcome := "ok"
	if err != nil {
		outcome = string(answer.KindOf(err))
	}
	m.requests.WithLabelValues(mode, outcome).Inc()
	m.seconds.WithLabelValues(mode).Observe(took.Seconds())
	if out != nil {
		m.tokens.WithLabelValues("prompt").Add(float64(out.promptToks))
		m.tokens.WithLabelValues("generated").Add(float64(out.genToks))
	}
}

// gauges reads the peer's state at each scrape.
type gauges struct{ n *Node }

var (
	gaugeDescs = map[string]*prometheus.Desc{}
	gaugeHelp  = []struct{ name, help string }{
		{"swarm_peers", "Peers in this peer's table, by state (alive, known)."},
		{"swarm_connections", "Open libp2p connections."},
		{"swarm_dht_routing_table", "Peers in the DHT routing table."},
		{"swarm_queue_waiting", "Requests waiting for a free slot on this peer's models."},
		{"swarm_queue_waited_total", "Requests that had to wait for a slot, since start."},
		{"swarm_sessions_active", "Requests and stage sessions this peer serves now."},
		{"swarm_sessions_capacity", "Concurrent requests and sessions this peer accepts (0 while it takes no work)."},
		{"swarm_role_tokens_per_second", "Measured decode speed of a role this peer serves."},
		{"swarm_shard_ms_per_layer", "Measured decode time of one layer of a shard this peer serves."},
		{"swarm_memory_budget_bytes", "max_memory: what the served models may take (0: none)."},
		{"swarm_memory_used_bytes", "What the loaded models take of max_memory."},
		{"swarm_taking_work", "1 while this peer takes new work, 0 while power (battery, heat) stops it."},
		{"swarm_battery_percent", "Battery charge, where there is a battery."},
		{"swarm_banned_peers", "Peers this peer's trust ledger bans now."},
		{"swarm_ledger_work", "Work in this peer's ledger of give and take, in tokens of a whole model, decayed: given (this peer for others) or taken (others for it)."},
		{"swarm_ledger_peers", "Peers in this peer's ledger of give and take."},
		{"swarm_nat_punches_total", "Hole punches this peer took part in, by result (success, failure)."},
		{"swarm_nat_direct_dials_total", "Relayed connections upgraded by a direct dial, no punch needed."},
		{"swarm_relay_circuits_total", "Circuits this peer's relay service opened."},
		{"swarm_relay_circuits_open", "Circuits open through this peer's relay service."},
		{"swarm_relay_refused_total", "Circuit requests this peer's relay service refused."},
		{"swarm_relayed_bytes_total", "Bytes this peer relayed for others."},
	}
	gaugeLabels = map[string][]string{"swarm_peers": {"state"}, "swarm_role_tokens_per_second": {"role", "model"},
		"swarm_shard_ms_per_layer": {"model", "layers"}, "swarm_nat_punches_total": {"result"},
		"swarm_ledger_work": {"kind"}}
)

func init() {
	for _, g := range gaugeHelp {
		gaugeDescs[g.name] = prometheus.NewDesc(g.name, g.help, gaugeLabels[g.name], nil)
	}
}

// Describe implements prometheus.Collector.
func (g *gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range gaugeDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (g *gauges) Collect(ch chan<- prometheus.Metric) {
	st, err := g.n.Status()
	if err != nil {
		return
	}
	gauge := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(gaugeDescs[name], prometheus.GaugeValue, v, labels...)
	}
	counter := func(name string, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(gaugeDescs[name], prometheus.CounterValue, v, labels...)
	}
	gauge("swarm_peers", float64(st.PeersAlive), "alive")
	gauge("swarm_peers", float64(st.PeersKnown), "known")
	gauge("swarm_connections", float64(st.Connections))
	gauge("swarm_dht_routing_table", float64(st.DHTPeers))
	gauge("swarm_queue_waiting", float64(st.Queue.Waiting))
	counter("swarm_queue_waited_total", float64(st.Queue.Waited))
	gauge("swarm_memory_budget_bytes", float64(st.Memory.MaxBytes))
	gauge("swarm_memory_used_bytes", float64(st.Memory.UsedBytes))
	taking := 0.0
	if st.Power.TakingWork {
		taking = 1
	}
	gauge("swarm_taking_work", taking)
	if b := st.Power.Battery; b != nil {
		gauge("swarm_battery_percent", float64(b.Percent))
	}
	self := g.n.selfCapability()
	gauge("swarm_sessions_active", float64(self.Load.Active))
	gauge("swarm_sessions_capacity", float64(self.Load.Capacity))
	for _, r := range self.Roles {
		gauge("swarm_role_tokens_per_second", r.TokPerSec, r.Role, r.ModelCID)
	}
	for _, s := range self.Shards {
		gauge("swarm_shard_ms_per_layer", s.MsPerLayer, s.ModelCID, strconv.Itoa(s.Start)+"-"+strconv.Itoa(s.End))
	}
	banned := 0
	if t := g.n.Trust(); t != nil {
		now := time.Now()
		for _, e := range t.Snapshot() {
			if e.BanUntil.After(now) {
				banned++
			}
		}
	}
	gauge("swarm_banned_peers", float64(banned))
	gauge("swarm_ledger_work", st.Ledger.Given, "given")
	gauge("swarm_ledger_work", st.Ledger.Taken, "taken")
	gauge("swarm_ledger_peers", float64(st.Ledger.Peers))
	c := st.NAT.Counters
	counter("swarm_nat_punches_total", float64(c.PunchSuccesses), "success")
	counter("swarm_nat_punches_total", float64(c.PunchFailures), "failure")
	counter("swarm_nat_direct_dials_total", float64(c.DirectDials))
	counter("swarm_relay_circuits_total", float64(c.RelayCircuits))
	gauge("swarm_relay_circuits_open", float64(c.RelayOpen))
	counter("swarm_relay_refused_total", float64(c.RelayRefused))
	counter("swarm_relayed_bytes_total", float64(c.RelayedBytes))
}

// Metrics is what GET /metrics serves: this peer's swarm_* metrics, and
// libp2p's and Go's from the process's default registry.
func (n *Node) Metrics() prometheus.Gatherer {
	return prometheus.Gatherers{n.metrics.reg, prometheus.DefaultGatherer}
}
