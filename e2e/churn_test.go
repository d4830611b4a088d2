package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
)

// synthModel makes a synthetic model with the real CLI, once per size and type.
func synthModel(t *testing.T, arch, size, typ string) string {
	t.Helper()
	archMu.Lock()
	defer archMu.Unlock()
	key := arch + "-" + size + "-" + typ
	if p, ok := archModels[key]; ok {
		return p
	}
	p := filepath.Join(bin, key+".gguf")
	if out, code := runSwarmd(t, "model", "synth", "--arch", arch, "--size", size, "--type", typ, "-o", p); code != 0 {
		t.Fatalf("swarmd model synth: exit %d\n%s", code, out)
	}
	archModels[key] = p
	return p
}

// TestPipelineChurn: three layer ranges, each held by two peers, and an
// originator holding none; quantized weights. While the originator asks
// one question after another, a chaos loop picks a stage every ~2 s
// (three times in four one on the route the last ask took) and, in turn,
// kill -9s it (restarting it 1.5 s later on the same data dir) or
// SIGSTOPs it (SIGCONT 1.5 s later). Asking goes on until both the asks
// and the faults reach their counts. Every ask must succeed with exactly
// the text of the undisturbed run.
func TestPipelineChurn(t *testing.T) {
	for _, tc := range []struct {
		typ                  string
		asks, tokens, faults int
		wantReroutes         int
	}{{"q8_0", 40, 256, 20, 5}, {"q4_k", 12, 128, 8, 2}} {
		t.Run(tc.typ, func(t *testing.T) { churn(t, tc.typ, tc.asks, tc.tokens, tc.faults, tc.wantReroutes) })
	}
}

func churn(t *testing.T, typ string, asks, tokens, faults, wantReroutes int) {
	model := synthModel(t, "qwen3", "small", typ)
	origin := startDaemon(t, "", "--no-mdns", "--threads", "1")
	boot := origin.bootstrapAddr()
	var stages []*daemon
	for _, r := range [][2]int{{0, 3}, {3, 6}, {6, 8}} {
		for range 2 {
			stages = append(stages, startDaemon(t, "", "--no-mdns", "--threads", "1", "--bootstrap", boot,
				"--shard", fmt.Sprintf("%s:%d-%d", model, r[0], r[1])))
		}
	}
	eventually(t, 30*time.Second, "six holders announced", func() bool {
		var sh client.Shards
		origin.ctlJSON(&sh, "shards")
		return len(sh.Models) == 1 && sh.Models[0].Covered && len(sh.Models[0].Holders) == 6
	})
	c := client.New(origin.api, "")
	rp := float32(1.5)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ask := func(p string) (*answer.Result, error) {
		return c.Query(ctx, client.QueryRequest{Query: p, Mode: "pipeline", MaxTokens: tokens, RepeatPenalty: &rp}, nil)
	}
	// References, undisturbed; prompts whose answer runs the whole length.
	refs := map[string]string{}
	var prompts []string
	for _, p := range append(slices.Clone(pipePrompts), "Describe a quiet harbour at dawn.", "List the planets in order.") {
		res, err := ask(p)
		if err != nil {
			t.Fatal(err)
		}
		if res.Pipeline != nil && res.Pipeline.Done == "length" {
			refs[p] = res.FinalAnswer
			prompts = append(prompts, p)
		}
		if len(prompts) == 2 {
			break
		}
	}
	if len(prompts) == 0 {
		t.Fatalf("no prompt runs %d tokens without ending", tokens)
	}

	type outcome struct {
		prompt string
		res    *answer.Result
		err    error
		took   time.Duration
	}
	results := make(chan outcome)
	var enough atomic.Bool // the faults reached their count
	limit := time.Now().Add(150 * time.Second)
	go func() {
		defer close(results)
		for i := 0; i < asks || !enough.Load() && time.Now().Before(limit); i++ {
			p := prompts[i%len(prompts)]
			start := time.Now()
			res, err := ask(p)
			results <- outcome{p, res, err, time.Since(start)}
		}
	}()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	type fault struct {
		d      *daemon
		killed bool
		at     time.Time
	}
	var down *fault
	ids := make([]string, len(stages))
	for i, d := range stages {
		ids[i] = d.peerID()
	}
	onRoute := map[string]bool{} // peers of the route the last ask took
	next := time.Now().Add(time.Second)
	kills, stops, failures, differ := 0, 0, 0, 0
	var reroutes []answer.Reroute
	var took []time.Duration
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	heal := func() {
		if down == nil {
			return
		}
		if down.killed {
			down.d.start()
		} else {
			down.d.cmd.Process.Signal(syscall.SIGCONT)
		}
		down = nil
	}
	for done := false; !done; {
		select {
		case o, ok := <-results:
			if !ok {
				done = true
				break
			}
			took = append(took, o.took)
			if o.err != nil {
				failures++
				t.Errorf("ask failed: %v", o.err)
				continue
			}
			if o.res.FinalAnswer != refs[o.prompt] {
				differ++
				t.Errorf("text differs from the undisturbed run (%d vs %d bytes)", len(o.res.FinalAnswer), len(refs[o.prompt]))
			}
			pr := o.res.Pipeline
			if pr == nil {
				pr = &answer.Pipeline{}
			}
			reroutes = append(reroutes, pr.Reroutes...)
			if n := len(pr.Hops); n > 0 {
				onRoute = map[string]bool{}
				for _, h := range pr.Hops[max(n-3, 0):] { // the last route's three hops
					onRoute[h.Peer] = true
				}
			}
		case now := <-tick.C:
			if down != nil && now.Sub(down.at) >= 1500*time.Millisecond {
				heal()
				next = now.Add(500 * time.Millisecond)
				enough.Store(kills+stops >= faults)
			}
			if down == nil && now.After(next) {
				// A stage on the route the last ask took, most of the
				// time: chaos the routes never meet proves nothing.
				pool := stages
				if rng.IntN(4) != 0 {
					var on []*daemon
					for i, d := range stages {
						if onRoute[ids[i]] {
							on = append(on, d)
						}
					}
					if len(on) > 0 {
						pool = on
					}
				}
				d := pool[rng.IntN(len(pool))]
				// Kills and stops in turn: a run of coin flips that all
				// came up stops (1 in 256 for 8 faults) killed nothing,
				// and a stop of 1.5 s may end before it is noticed.
				if (kills+stops)%2 == 0 {
					d.cmd.Process.Kill()
					<-d.exited
					kills++
					down = &fault{d, true, now}
				} else {
					d.cmd.Process.Signal(syscall.SIGSTOP)
					stops++
					down = &fault{d, false, now}
				}
			}
		}
	}
	heal()
	var costs, detects []float64
	for _, r := range reroutes {
		costs = append(costs, r.CostMS)
		detects = append(detects, r.DetectMS)
	}
	t.Logf("%s: %d asks of %d tokens, %d kill -9, %d SIGSTOP: %d failed, %d differ, %d re-routes; failover cost (detection + replay) p50 %.0f ms, p95 %.0f ms; detection p50 %.0f ms, p95 %.0f ms; ask time p50 %s",
		typ, len(took), tokens, kills, stops, failures, differ, len(reroutes), pct(costs, 50), pct(costs, 95), pct(detects, 50), pct(detects, 95), pctDur(took, 50))
	if len(reroutes) < wantReroutes {
		t.Errorf("only %d re-routes under churn: the chaos did not reach the routes", len(reroutes))
	}
}

func pct(xs []float64, p int) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}

func pctDur(xs []time.Duration, p int) time.Duration {
	f := make([]float64, len(xs))
	for i, x := range xs {
		f[i] = float64(x)
	}
	return time.Duration(pct(f, p)).Round(time.Millisecond)
}
