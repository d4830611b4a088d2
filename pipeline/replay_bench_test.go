package pipeline

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkReplay measures what a failover's replay costs on the 0.6b
// shape, split over two stages: the prompt and n generated tokens, run in
// the original batch shapes (the default: the prompt in one batch, then
// each token alone) and, for comparison, in one batch. Run with
// go test -run XXX -bench Replay -benchtime 3x ./pipeline
func BenchmarkReplay(b *testing.B) {
	for _, typ := range []string{"q8_0", "q4_k"} {
		full, cid := modelOf(b, "qwen3", "0.6b", typ)
		origin, s1, s2 := newStagePeer(b), newStagePeer(b), newStagePeer(b)
		s1.serveFile(b, full, cid, 0, 14)
		s2.serveFile(b, full, cid, 14, 28)
		o := originatorForFile(b, full, origin, s1, s2)
		ref, hs, err := o.Resolve(cid)
		if err != nil {
			b.Fatal(err)
		}
		hops, err := o.plan(ref, hs, nil)
		if err != nil {
			b.Fatal(err)
		}
		prompt := make([]int32, 64)
		for i := range prompt {
			prompt[i] = int32(i*37%4000 + 5)
		}
		for _, n := range []int{32, 128} {
			gen := make([]int32, n)
			for i := range gen {
				gen[i] = int32(i*53%4000 + 7)
			}
			replay := append(append([]int32{}, prompt...), gen...)
			shapes := replayShapes(len(prompt), len(gen))
			for _, mode := range []struct {
				name    string
				batches []int
			}{{"shapes", shapes}, {"onebatch", nil}} {
				b.Run(fmt.Sprintf("%s/%d+%d/%s", typ, len(prompt), n, mode.name), func(b *testing.B) {
					for b.Loop() {
						c, err := o.openChain(context.Background(), o.newOpen(ref, hops, Request{DType: DTypeF32}))
						if err != nil {
							b.Fatal(err)
						}
						t0 := time.Now()
						if _, _, err := c.step(context.Background(), replay, mode.batches); err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(float64(time.Since(t0).Milliseconds()), "replay_ms")
						c.close()
					}
				})
			}
		}
	}
}

// BenchmarkFailover measures a failover on the 0.6b shape, detection
// included: two routes of two stages ([0,14) and [14,28), one thread
// each), a primary stage killed or hung after 32 of 64 tokens, recovered
// by a replay or by the warm standby. It reports the re-route's cost
// (detection + replay or take-over) per run, and its median and worst.
// go test -run XXX -bench Failover -benchtime 5x ./pipeline
func BenchmarkFailover(b *testing.B) {
	const n, at = 64, 32
	for _, typ := range []string{"q8_0"} {
		full, cid := modelOf(b, "qwen3", "0.6b", typ)
		for _, fault := range []string{"kill", "hang"} {
			for _, standby := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/replay", typ, fault)
				if standby {
					name = fmt.Sprintf("%s/%s/standby", typ, fault)
				}
				b.Run(name, func(b *testing.B) {
					var costs []float64
					for b.Loop() {
						origin := newStagePeer(b)
						var peers []*stagePeer
						for range 2 {
							s1, s2 := newStagePeer(b), newStagePeer(b)
							s1.serveFile(b, full, cid, 0, 14)
							s2.serveFile(b, full, cid, 14, 28)
							peers = append(peers, s1, s2)
						}
						fail := failable(b, fault, peers...)
						o := originatorForFile(b, full, origin, peers...)
						_, onTrace, onToken := failHopAt(at, 1, fail)
						think := false
						res, err := o.Generate(context.Background(), Request{Messages: question, Think: &think, MaxTokens: n,
							Sampling: greedy, Standby: standby, OnTrace: onTrace, OnToken: onToken})
						if err != nil {
							b.Fatal(err)
						}
						if len(res.Reroutes) != 1 {
							b.Fatalf("re-routes: %+v", res.Reroutes)
						}
						costs = append(costs, res.Reroutes[0].CostMS)
						for _, p := range append(peers, origin) {
							p.srv.Close()
							p.h.Close()
						}
					}
					b.ReportMetric(pct50(costs), "p50_ms")
					b.ReportMetric(slicesMax(costs), "max_ms")
				})
			}
		}
	}
}

func pct50(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	slices.Sort(s)
	return s[len(s)/2]
}

func slicesMax(xs []float64) float64 { return slices.Max(xs) }
