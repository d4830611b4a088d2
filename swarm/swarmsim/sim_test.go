package swarmsim

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/llmswarm/llmswarm/internal/nettest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, nettest.Libp2pWorkers()...) }

// envInts reads a comma-separated list of peer counts.
func envInts(t *testing.T, name string) []int {
	var out []int
	for _, f := range strings.Split(os.Getenv(name), ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 {
			t.Fatalf("%s: %q is not a peer count (2 or more)", name, f)
		}
		out = append(out, n)
	}
	return out
}

// smallN is the swarm TestSwarm runs in make test (under -race). Today's
// control plane costs every peer O(N) per heartbeat, so the simulation's
// CPU grows as N² or faster: on this project's 2-core machine a simulated
// second costs about 0.6 s at 20 peers and 3.6 s at 40 (docs/scale.md).
// -race also caps a process at 8128 goroutines, and a simulated peer runs
// about 190: no more than about 40 peers can run under it. SWARMSIM_N=200
// runs the same assertions at 200 peers, without -race.
const smallN = 10

// TestSwarm runs the scenario on one swarm and holds today's control
// plane to what it does: every peer sees every other, a newcomer sees
// every holder of the model and assembles a route, and a peer that
// crashes on that route stops being routable within the dead-after
// window (misses × heartbeat) plus one heartbeat of slack for the last
// beat's age and the sweep's tick.
func TestSwarm(t *testing.T) {
	ns := envInts(t, "SWARMSIM_N")
	if len(ns) == 0 {
		ns = []int{smallN}
	}
	for _, n := range ns {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := Config{Link: Link{Latency: 50 * time.Millisecond}}
				// make test's run skips the idle measurement (TestIdleScale's):
				// its assertions are about discovery and detection.
				sc := Scenario{N: n, Config: cfg, Logf: t.Logf, Window: 2 * time.Second}
				if os.Getenv("SWARMSIM_N") != "" {
					sc.Warmup, sc.Window = idleWarmup, idleWindow
				}
				rep, err := sc.Run()
				t.Logf("SIM %s", rep)
				if err != nil {
					t.Fatal(err)
				}
				c := cfg.withDefaults()
				if bound := time.Duration(c.Misses+1) * c.Heartbeat; rep.Detect > bound {
					t.Errorf("crash on the route noticed after %s, want <= %s", rep.Detect, bound)
				}
				if !rep.Rerouted {
					t.Errorf("no route without the crashed peer, though each range has another holder")
				}
			})
		})
	}
}

// The idle measurement: after the warm-up, over the window (simulated).
var (
	idleWarmup = envDuration("SWARMSIM_WARMUP", 30*time.Second)
	idleWindow = envDuration("SWARMSIM_WINDOW", 30*time.Second)
)

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

// TestIdleScale measures the idle control plane's traffic at each N of
// SWARMSIM_SCALE (e.g. 10,20,40,200): the "before" curve of docs/scale.md.
func TestIdleScale(t *testing.T) {
	ns := envInts(t, "SWARMSIM_SCALE")
	if len(ns) == 0 {
		t.Skip("SWARMSIM_SCALE=10,20,40 measures the idle traffic at those swarm sizes")
	}
	for _, n := range ns {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := New(Config{Link: Link{Latency: 50 * time.Millisecond}})
				defer s.Close()
				for range n {
					if _, err := s.Add(Spec{}); err != nil {
						t.Fatal(err)
					}
				}
				d, err := s.Settle(10*time.Minute, t.Logf)
				if err != nil {
					t.Fatal(err)
				}
				// Past the DHT loop's first lookups (2, 4, 8, 16 s), as the
				// real daemons are when idle-traffic.sh measures them.
				t.Logf("N=%d settled in %s", n, d)
				time.Sleep(idleWarmup)
				r := s.Measure(idleWindow)
				heap, gs := PerPeer(n)
				t.Logf("SIMIDLE N=%d settle=%s %s; %s; heap %.1f MiB and %.0f goroutines per peer", n, d, r, s.Tables(), heap/(1<<20), gs)
			})
		})
	}
}
