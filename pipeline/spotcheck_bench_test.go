package pipeline

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSpotCheck measures what a spot-checked generation costs on the
// 0.6b shape (q8_0), against the same generation unchecked: two routes of
// two one-thread stages ([0,14) and [14,28), the second route cut at 10 for
// "other-cuts"), 64 tokens. Checked, the second route runs every step at
// the same time as the first, both return logits (152k floats a step) and
// the originator samples and compares them. Every stage runs in this
// process, so its CPU time is the swarm's compute. Per run it reports the
// medians of wall time, decode tok/s, time to first token, CPU time, and
// the largest difference seen between two agreeing routes.
// go test -run XXX -bench SpotCheck -benchtime 5x ./pipeline
func BenchmarkSpotCheck(b *testing.B) {
	const n = 64
	full, cid := modelOf(b, "qwen3", "0.6b", "q8_0")
	for _, tc := range []struct {
		name  string
		p     float64
		dtype string
		cut   int // the second route's cut
	}{
		{"off", -1, DTypeF32, 14},
		{"on", 1, DTypeF32, 14},
		{"on/f32-other-cuts", 1, DTypeF32, 10},
		{"on/f16-other-cuts", 1, DTypeF16, 10},
	} {
		b.Run(tc.name, func(b *testing.B) {
			origin := newStagePeer(b)
			var peers []*stagePeer
			for i, cut := range []int{14, tc.cut} {
				s1, s2 := newStagePeer(b), newStagePeer(b)
				s1.serveFile(b, full, cid, 0, cut)
				s2.serveFile(b, full, cid, cut, 28)
				for _, s := range []*stagePeer{s1, s2} {
					s.srv.Local()[0].MsPerLayer = float64(1 + i) // the first route is the primary
				}
				peers = append(peers, s1, s2)
			}
			o := originatorForFile(b, full, origin, peers...)
			o.SpotCheck.Probability = tc.p
			think := false
			var wall, tps, ttft, cpu, diff []float64
			for b.Loop() {
				c0, t0 := cpuTime(), time.Now()
				res, err := o.Generate(context.Background(), Request{Messages: question, Think: &think, MaxTokens: n,
					Sampling: greedy, DType: tc.dtype})
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Reroutes) != 0 || tc.p > 0 && res.SpotChecked != len(res.Tokens) {
					b.Fatalf("%d of %d steps checked, re-routes %+v", res.SpotChecked, len(res.Tokens), res.Reroutes)
				}
				wall = append(wall, msSince(t0))
				cpu = append(cpu, ms(cpuTime()-c0))
				tps = append(tps, res.DecodeTPS)
				ttft = append(ttft, res.TTFTMS)
				diff = append(diff, res.SpotMaxDiff)
			}
			b.ReportMetric(pct50(wall), "wall_ms")
			b.ReportMetric(pct50(tps), "decode_tok/s")
			b.ReportMetric(pct50(ttft), "ttft_ms")
			b.ReportMetric(pct50(cpu), "cpu_ms")
			b.ReportMetric(slicesMax(diff), "max_diff")
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
