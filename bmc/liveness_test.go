package bmc_test

import (
	"context"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/bmc"
)

// livenessRun heartbeats node a every beat and node b once, then polls the
// signed table until the board declares b dead, checking the timing on the
// board's clock, then revives b.
func livenessRun(t *testing.T, b *bmc.Bridge, cfg bmc.Config, beat, wallBudget time.Duration) {
	t.Helper()
	ctx := ctxT(t, wallBudget+20*time.Second)
	a, dead := bmc.HandleFor([]byte("peer-a")), bmc.HandleFor([]byte("peer-b"))
	limit := cfg.Period * time.Duration(cfg.Misses)
	mustBeat := func(h bmc.Handle) {
		if _, err := b.Heartbeat(ctx, h, 1); err != nil {
			t.Fatalf("heartbeat: %v", err)
		}
	}
	mustBeat(a)
	mustBeat(dead)
	lastBeatB := time.Now()
	first, err := b.Table(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wallStart := time.Now()
	lastBeatA := time.Now()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	deadline := time.After(wallBudget + 5*time.Second)
	var tab *bmc.Table
	prev := first
	for {
		select {
		case <-deadline:
			t.Fatalf("board did not declare the silent node dead within %v", wallBudget+5*time.Second)
		case <-poll.C:
		}
		if time.Since(lastBeatA) >= beat {
			mustBeat(a)
			lastBeatA = time.Now()
		}
		asked := time.Now()
		if tab, err = b.Table(ctx); err != nil {
			t.Fatal(err)
		}
		if !tab.Live(a) {
			t.Fatalf("heartbeating node declared dead: %+v", tab.Nodes)
		}
		n, ok := tab.Node(dead)
		if !ok {
			t.Fatalf("node missing from %+v", tab.Nodes)
		}
		// Ages advance exactly with the board's uptime.
		if p, _ := prev.Node(dead); n.Age-p.Age != tab.Uptime-prev.Uptime {
			t.Fatalf("age moved %v while uptime moved %v", n.Age-p.Age, tab.Uptime-prev.Uptime)
		}
		prev = tab
		if n.Live {
			if n.Age > limit {
				t.Fatalf("node live at board age %v > %v", n.Age, limit)
			}
			continue
		}
		// Dead: silent for more than the limit on the board's clock (the
		// previous poll saw it live with age <= limit), and the board had
		// decided by a request sent within the wall-clock budget.
		if n.Age <= limit {
			t.Fatalf("declared dead at board age %v <= %v", n.Age, limit)
		}
		if since := asked.Sub(lastBeatB); since > wallBudget {
			t.Fatalf("declared dead %v after its last beat, budget %v", since, wallBudget)
		}
		t.Logf("dead at board age %v; seen %v after its last beat (wall)", n.Age, asked.Sub(lastBeatB).Round(time.Millisecond))
		break
	}
	// millis() follows the wall clock (the harness throttles simavr): it
	// never runs ahead; starved of CPU it falls behind (0.67x of wall
	// time with two make tests on two cores), never to a stop.
	boardDelta, wallDelta := tab.Uptime-first.Uptime, time.Since(wallStart)
	if boardDelta < wallDelta/3 || boardDelta > wallDelta*5/4+200*time.Millisecond {
		t.Errorf("board clock advanced %v over %v of wall time", boardDelta, wallDelta)
	}
	// A node that beats again is live again.
	mustBeat(dead)
	tab, err = b.Table(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := tab.Node(dead); !n.Live || n.Age > limit {
		t.Fatalf("node not revived by a heartbeat: %+v", n)
	}
}

func provisioned(t *testing.T) (*bmc.Bridge, []byte) {
	t.Helper()
	board := startBoard(t)
	key := newKey(t)
	b := openBridge(t, board.Path(), key)
	if err := b.Provision(ctxT(t, 5*time.Second), key); err != nil {
		t.Fatal(err)
	}
	return b, key
}

// TestLivenessDefaults: with the defaults (3 s period, 2 misses) a node that
// stops beating is dead within the 7 s budget.
func TestLivenessDefaults(t *testing.T) {
	t.Parallel()
	b, _ := provisioned(t)
	cfg, err := b.Config(ctxT(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if cfg != (bmc.Config{Period: bmc.DefaultPeriod, Misses: bmc.DefaultMisses}) {
		t.Fatalf("default config %+v", cfg)
	}
	livenessRun(t, b, cfg, 2*time.Second, 7*time.Second)
}

// TestLivenessConfigured: CFG changes the rule; Options.Config is applied on
// connect.
func TestLivenessConfigured(t *testing.T) {
	t.Parallel()
	board := startBoard(t)
	key := newKey(t)
	cfg := bmc.Config{Period: 200 * time.Millisecond, Misses: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := bmc.Open(ctx, board.Path(), &bmc.Options{Key: key, Config: cfg, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Provision(ctx, key); err != nil {
		t.Fatal(err)
	}
	got, err := b.Config(ctx)
	if err != nil || got != cfg {
		t.Fatalf("config after connect %+v, %v; want %+v", got, err, cfg)
	}
	livenessRun(t, b, cfg, 100*time.Millisecond, 2*time.Second)

	// Lengthening the period keeps a node alive longer; shortening kills it.
	h := bmc.HandleFor([]byte("peer-c"))
	if _, err := b.Heartbeat(ctx, h, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SetConfig(ctx, bmc.Config{Period: 100 * time.Millisecond, Misses: 1}); err != nil {
		t.Fatal(err)
	}
	for {
		tab, err := b.Table(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tab.Dead(h) {
			if tab.Period != 100*time.Millisecond || tab.Misses != 1 {
				t.Fatalf("table config %v %d", tab.Period, tab.Misses)
			}
			break
		}
	}
}
