package swarmsim

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
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

// smallN is the swarm TestSwarm runs in make test (under -race). The old
// control plane cost every peer O(N) per heartbeat, so a simulated second
// cost 0.6 s at 20 peers and 3.6 s at 40 on this project's 2-core machine;
// today's costs about 0.03 s at 10 peers and 0.13 s at 20 (docs/scale.md).
// -race multiplies memory: 80 peers under it grew past 10 GiB (2 GiB
// without). SWARMSIM_N=200 runs the same assertions at 200 peers, without
// -race.
const smallN = 10

// The goals (issue 28) the control plane is held to.
const (
	goalDetect   = 3 * time.Second // a dead peer on a route in use noticed
	goalCoverage = 2 * time.Second // a newcomer sees every holder of a model
	goalIdle     = 2000            // idle bytes/s sent per peer
)

// TestSwarm runs the scenario on one swarm and holds the control plane to
// the goals: after a warm-up (the DHT's and gossip's start-up
// work, about 60 KiB/s per peer in the first 2 s at 10 peers, is over by
// then) an idle peer sends at most goalIdle bytes/s; a newcomer sees every
// holder of the model within goalCoverage and assembles a route; a peer
// that crashes on the route it uses is not routable within goalDetect;
// and every other peer, most of which do not use it, holds it dead within
// the bound for peers not in use (Liveness.IdleDeadAfter over the table,
// and a tick of the sweep). SWARMSIM_N=100,1000 runs it at those sizes
// (past 65 the tables are bounded: a swarm of neighbourhoods), and
// SWARMSIM_JOIN=10ms starts the peers one every 10 ms, as a swarm grows,
// rather than all at once.
func TestSwarm(t *testing.T) {
	ns := envInts(t, "SWARMSIM_N")
	if len(ns) == 0 {
		ns = []int{smallN}
	}
	for _, n := range ns {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := Config{Link: Link{Latency: 50 * time.Millisecond}}
				sc := Scenario{N: n, Config: cfg, Logf: t.Logf, Warmup: idleWarmup, Window: idleWindow, Join: envDuration("SWARMSIM_JOIN", 0),
					Limit: envDuration("SWARMSIM_LIMIT", 5*time.Minute)}
				rep, err := sc.Run()
				t.Logf("SIM %s", rep)
				if err != nil {
					t.Fatal(err)
				}
				if rep.Idle.MeanBytes > goalIdle {
					t.Errorf("idle peers send %.0f B/s each, want <= %d", rep.Idle.MeanBytes, goalIdle)
				}
				// Past the table of neighbours (64) which peers a newcomer meets
				// first varies from run to run, and so does when it has seen
				// every holder: 1.25 to 2.35 s over four runs at 100 peers
				// (2026-11-29), around the goal, which is issue 28's open item
				// there; twice the goal bounds a regression.
				coverage := goalCoverage
				if n > 64 {
					coverage = 2 * goalCoverage
				}
				if rep.Coverage > coverage {
					t.Errorf("newcomer saw every holder after %s, want <= %s", rep.Coverage, coverage)
				}
				if rep.Detect > goalDetect {
					t.Errorf("crash on the route in use noticed after %s, want <= %s", rep.Detect, goalDetect)
				}
				if bound := rep.Bound(cfg); rep.DetectAll > bound {
					t.Errorf("crash noticed by every peer after %s, want <= %s", rep.DetectAll, bound)
				}
				if !rep.Rerouted {
					t.Errorf("no route without the crashed peer, though each range has another holder")
				}
			})
		})
	}
}

// TestSwarmLimitBelowBound: a Limit shorter than the bound for peers not
// in use (SWARMSIM_LIMIT=45s at 80 peers, whose bound is 330 s) neither
// ends the wait for every peer to notice a crash before that bound, nor
// keeps the route user's reroute unmeasured: it replans as soon as it
// notices the crash, and the report says whether it could.
func TestSwarmLimitBelowBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 10 // 8 holders, none a seed: two a range
		cfg := Config{Link: Link{Latency: 50 * time.Millisecond}}
		sc := Scenario{N: n, Config: cfg, Logf: t.Logf, Window: time.Second, Limit: 10 * time.Second}
		rep, err := sc.Run()
		t.Logf("SIM %s", rep)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Rerouted {
			t.Errorf("no route without the crashed peer, though each range has another holder")
		}
		if bound := rep.Bound(cfg); rep.DetectAll > bound {
			t.Errorf("crash noticed by every peer after %s, want <= %s", rep.DetectAll, bound)
		}
	})
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
// SWARMSIM_SCALE (e.g. 10,20,40,200): the curves of docs/scale.md.
// SWARMSIM_JOIN (as TestSwarm's) starts the peers one every so long
// rather than all at once. SWARMSIM_REFRESH sets record_refresh (default
// 5 min, longer than the warm-up and window: a shorter one puts the
// refreshes in the window). SWARMSIM_GOROUTINES=FILE writes the idle
// swarm's goroutines there, counted by stack (pprof's debug=1 text), and
// SWARMSIM_HEAP=FILE its heap profile (and FILE.100, FILE.200, ... the
// heap's as that many have joined). A line every 100 joined says where
// a long start is, with the process's resident memory and Go's share.
func TestIdleScale(t *testing.T) {
	ns := envInts(t, "SWARMSIM_SCALE")
	if len(ns) == 0 {
		t.Skip("SWARMSIM_SCALE=10,20,40 measures the idle traffic at those swarm sizes")
	}
	for _, n := range ns {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			real := time.Now() // outside the bubble: the machine's clock
			var simulated time.Duration
			defer func() {
				if simulated > 0 {
					el := time.Since(real)
					t.Logf("SIMCPU N=%d %s of real time for %s simulated: %.2f s per simulated s", n, el.Round(time.Millisecond), simulated, el.Seconds()/simulated.Seconds())
				}
			}()
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				defer func() { simulated = time.Since(start) }()
				s := New(Config{Link: Link{Latency: 50 * time.Millisecond}, Refresh: envDuration("SWARMSIM_REFRESH", 0)})
				defer s.Close()
				for i := range n {
					if _, err := s.Add(Spec{}); err != nil {
						t.Fatal(err)
					}
					time.Sleep(envDuration("SWARMSIM_JOIN", 0))
					if (i+1)%100 == 0 && i+1 < n {
						// Where a long start is (outside the bubble's clock too).
						var ms runtime.MemStats
						runtime.ReadMemStats(&ms)
						t.Logf("joined %d at %s simulated: %s; heap %.1f MiB and %d goroutines per peer; %s resident",
							i+1, time.Since(start), s.Tables(),
							float64(ms.HeapAlloc)/float64(i+1)/(1<<20), runtime.NumGoroutine()/(i+1), resident())
						if path := os.Getenv("SWARMSIM_HEAP"); path != "" {
							writeProfile(t, fmt.Sprintf("%s.%d", path, i+1), "heap", 0)
						}
					}
				}
				d, err := s.Settle(10*time.Minute, t.Logf)
				if err != nil {
					t.Fatal(err)
				}
				var published uint64
				for _, p := range s.Peers() {
					published += p.Service.Published()
				}
				// Past the DHT loop's first lookups (2, 4, 8, 16 s), as the
				// real daemons are when idle-traffic.sh measures them.
				t.Logf("N=%d settled in %s, %d records published to gossip", n, d, published)
				time.Sleep(idleWarmup)
				r := s.Measure(idleWindow)
				heap, gs := PerPeer(n)
				t.Logf("SIMIDLE N=%d settle=%s %s; %s; heap %.1f MiB and %.0f goroutines per peer; %s resident", n, d, r, s.Tables(), heap/(1<<20), gs, resident())
				if path := os.Getenv("SWARMSIM_HEAP"); path != "" {
					// What the idle swarm's heap holds (pprof's format).
					writeProfile(t, path, "heap", 0)
				}
				if path := os.Getenv("SWARMSIM_GOROUTINES"); path != "" {
					// What the goroutines per peer are, by stack, idle.
					writeProfile(t, path, "goroutine", 1)
				}
			})
		})
	}
}

// writeProfile writes the named pprof profile to path.
func writeProfile(t *testing.T, path, name string, debug int) {
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup(name).WriteTo(f, debug); err != nil {
		t.Fatal(err)
	}
}

// resident is the process's resident memory now and at its peak (Linux's
// VmRSS and VmHWM), or why it is not known.
func resident() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "resident memory unknown (" + err.Error() + ")"
	}
	var rss, hwm string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rss = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			hwm = strings.TrimSpace(v)
		}
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return fmt.Sprintf("%s (peak %s; Go: heap %d MiB held of %d MiB, stacks %d MiB, other %d MiB)", rss, hwm,
		(ms.HeapSys-ms.HeapReleased)>>20, ms.HeapSys>>20, ms.StackSys>>20, (ms.Sys-ms.HeapSys-ms.StackSys)>>20)
}

// TestChangeCost measures what changes cost each peer at each N of
// SWARMSIM_CHANGES (e.g. 40,100): after settling and a warm-up, a tenth
// of the peers change their record (a thermal state, which goes out at
// once) one after another over a window, and the window's traffic per
// peer, less an idle window's, is divided by the changes (`SIMCHANGE`
// lines). SWARMSIM_NEIGHBOURS sets peer_table.neighbours (-1: no bound,
// so every change goes to the whole swarm by gossip, as before the bound).
func TestChangeCost(t *testing.T) {
	ns := envInts(t, "SWARMSIM_CHANGES")
	if len(ns) == 0 {
		t.Skip("SWARMSIM_CHANGES=40,100 measures what a changed record costs each peer")
	}
	nb := 0
	if v := os.Getenv("SWARMSIM_NEIGHBOURS"); v != "" {
		var err error
		if nb, err = strconv.Atoi(v); err != nil || nb < -1 {
			t.Fatalf("SWARMSIM_NEIGHBOURS=%q: want -1 or a peer count", v)
		}
	}
	for _, n := range ns {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := New(Config{Link: Link{Latency: 50 * time.Millisecond}, Neighbours: nb})
				defer s.Close()
				for range n {
					if _, err := s.Add(Spec{}); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := s.Settle(10*time.Minute, t.Logf); err != nil {
					t.Fatal(err)
				}
				time.Sleep(idleWarmup)
				const window = 20 * time.Second
				idle := s.Measure(window)
				changes := max(1, n/10)
				done := make(chan struct{})
				go func() {
					defer close(done)
					for _, p := range s.Live()[1 : changes+1] {
						p.Heat("fair")
						time.Sleep(window / time.Duration(changes+1))
					}
				}()
				busy := s.Measure(window)
				<-done
				per := (busy.MeanBytes - idle.MeanBytes) * window.Seconds() / float64(changes)
				t.Logf("SIMCHANGE N=%d neighbours=%d: %d changes in %s: %.1f KiB/s per peer (idle %.1f), %.0f bytes per peer per change; %s; %s",
					n, nb, changes, window, busy.MeanBytes/1024, idle.MeanBytes/1024, per, busy, s.Tables())
			})
		})
	}
}
