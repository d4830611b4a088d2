package pipeline

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/swarm"
)

// BenchmarkSpotCheck measures what a spot-checked generation costs on the
// 0.6b shape (q8_0) against the same generation unchecked: two routes of
// two one-thread stages ([0,14) and [14,28)), 64 tokens. Checked, the
// second route runs every step at the same time as the first, and the
// originator compares the tokens both last hops chose (greedy: see
// byTokens; before, both returned logits, 152k floats a step, and the
// originator sampled and compared them).
// Each iteration runs one unchecked and one checked generation, in
// alternating order, so that a shared machine's load falls on both alike.
// Every stage runs in this process, so its CPU time is the swarm's compute.
// It reports the medians of wall time, decode tok/s, time to first token
// and CPU time of each, and what that makes at the default probability.
// The "other-cuts" runs cut the second route at layer 10 (their
// max_diff, of logits, is 0 now that greedy checks compare tokens).
// go test -run XXX -bench SpotCheck -benchtime 5x ./pipeline
func BenchmarkSpotCheck(b *testing.B) {
	const n = 64
	full, cid := modelOf(b, "qwen3", "0.6b", "q8_0")
	setup := func(b *testing.B, cut int) *Originator {
		origin := newStagePeer(b)
		var peers []*stagePeer
		for i, c := range []int{14, cut} {
			s1, s2 := newStagePeer(b), newStagePeer(b)
			s1.serveFile(b, full, cid, 0, c)
			s2.serveFile(b, full, cid, c, 28)
			for _, s := range []*stagePeer{s1, s2} {
				s.srv.Local()[0].MsPerLayer = float64(1 + i) // the first route is the primary
			}
			peers = append(peers, s1, s2)
		}
		o := originatorTrusting(b, full, swarm.NewTrust(), origin, peers...)
		for i, p := range peers { // measured (the first route is the primary) and proven (checked only when asked)
			o.View.Trust().Measure(p.h.ID(), swarm.MsPerLayerKey(cid), float64(1+i/2))
			o.View.Trust().Pass(p.h.ID(), swarm.Claim{Model: cid, Start: 0, End: 28})
		}
		return o
	}
	type run struct{ wall, tps, ttft, cpu, diff []float64 }
	generate := func(b *testing.B, o *Originator, p float64, dtype string, r *run) {
		o.SpotCheck.Probability = p
		think := false
		c0, t0 := cpuTime(), time.Now()
		res, err := o.Generate(context.Background(), Request{Messages: question, Think: &think, MaxTokens: n,
			Sampling: greedy, DType: dtype})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Reroutes) != 0 || p > 0 && res.SpotChecked != len(res.Tokens) {
			b.Fatalf("%d of %d steps checked, re-routes %+v", res.SpotChecked, len(res.Tokens), res.Reroutes)
		}
		r.wall = append(r.wall, msSince(t0))
		r.cpu = append(r.cpu, ms(cpuTime()-c0))
		r.tps = append(r.tps, res.DecodeTPS)
		r.ttft = append(r.ttft, res.TTFTMS)
		r.diff = append(r.diff, res.SpotMaxDiff)
	}
	b.Run("off-vs-on", func(b *testing.B) {
		o := setup(b, 14)
		var off, on run
		i := 0
		for b.Loop() {
			if i%2 == 0 {
				generate(b, o, -1, DTypeF32, &off)
				generate(b, o, 1, DTypeF32, &on)
			} else {
				generate(b, o, 1, DTypeF32, &on)
				generate(b, o, -1, DTypeF32, &off)
			}
			i++
		}
		for _, m := range []struct {
			unit    string
			off, on []float64
		}{{"wall_ms", off.wall, on.wall}, {"decode_tok/s", off.tps, on.tps}, {"ttft_ms", off.ttft, on.ttft}, {"cpu_ms", off.cpu, on.cpu}} {
			b.ReportMetric(pct50(m.off), "off_"+m.unit)
			b.ReportMetric(pct50(m.on), "on_"+m.unit)
		}
		// At the default probability, one generation in ten pays the difference.
		b.ReportMetric(defaultSpotCheck*(pct50(on.cpu)/pct50(off.cpu)-1)*100, "extra_cpu_%_at_default")
		b.ReportMetric(defaultSpotCheck*(pct50(on.wall)/pct50(off.wall)-1)*100, "extra_wall_%_at_default")
	})
	for _, dtype := range []string{DTypeF32, DTypeF16} {
		b.Run("other-cuts/"+dtype, func(b *testing.B) {
			o := setup(b, 10)
			var on run
			for b.Loop() {
				generate(b, o, 1, dtype, &on)
			}
			b.ReportMetric(pct50(on.wall), "wall_ms")
			b.ReportMetric(slicesMax(on.diff), "max_diff")
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

// BenchmarkRealTrafficChecks measures what checking real traffic costs a
// generation on the small q8_0 shape (8 layers, routes of two one-thread
// stages, 16 tokens, greedy, f32 wire): unchecked; checked (a second
// route runs every step at once and the two last hops' tokens are
// compared); and the generation in which a last hop lying on real traffic
// from its 4th step is convicted (probes of every range, replays on mixed
// routes and a third holder's replay), each a fresh swarm. It reports the
// medians of wall time and the process's CPU time (every stage runs in
// this process: the swarm's compute).
// go test -run XXX -bench RealTrafficChecks -benchtime 5x ./pipeline
func BenchmarkRealTrafficChecks(b *testing.B) {
	const n = 16
	full, cid := modelOf(b, "qwen3", "small", "q8_0")
	setup := func(b *testing.B, liar bool) *Originator {
		origin := newStagePeer(b)
		ranges := [][2]int{{0, 4}, {4, 8}, {0, 4}, {4, 8}}
		if liar {
			ranges = append(ranges, [2]int{4, 8}) // a third holder
		}
		peers := servingPeers(b, full, cid, ranges...)
		if liar {
			l := newLiar(b, full, cid, 4, 8)
			l.realOnly, l.from = true, 3
			l.result = func(r *Result) {
				if len(r.Logits) == 0 {
					r.Token = (r.Token + 7) % 4096
				}
			}
			peers = append(peers, l.stagePeer)
		}
		o := originatorTrusting(b, full, swarm.NewTrust(), origin, peers...)
		for i, p := range peers {
			ms := float64(1 + i/2) // the first route is the primary
			if liar && p.srv.Shards()[0].Start == 4 {
				ms = 50 // slower than the liar, unmeasured (DefaultMsPerLayer): the primary takes it
			}
			if !liar || i < len(peers)-1 {
				o.View.Trust().Measure(p.h.ID(), swarm.MsPerLayerKey(cid), ms)
			}
			o.View.Trust().Pass(p.h.ID(), swarm.Claim{Model: cid, Start: 0, End: 8})
		}
		return o
	}
	generate := func(b *testing.B, o *Originator, p float64) (wall, cpu float64, res *answer.Pipeline) {
		o.SpotCheck.Probability = p
		think := false
		c0, t0 := cpuTime(), time.Now()
		res, err := o.Generate(context.Background(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy})
		if err != nil {
			b.Fatal(err)
		}
		return msSince(t0), ms(cpuTime() - c0), res
	}
	b.Run("unchecked-vs-checked", func(b *testing.B) {
		o := setup(b, false)
		var offW, offC, onW, onC []float64
		for b.Loop() {
			w, c, _ := generate(b, o, -1)
			offW, offC = append(offW, w), append(offC, c)
			w, c, res := generate(b, o, 1)
			if res.SpotChecked != len(res.Tokens) || res.Mismatches != 0 {
				b.Fatalf("%d of %d steps checked, %d mismatches", res.SpotChecked, len(res.Tokens), res.Mismatches)
			}
			onW, onC = append(onW, w), append(onC, c)
		}
		b.ReportMetric(pct50(offW), "unchecked_wall_ms")
		b.ReportMetric(pct50(offC), "unchecked_cpu_ms")
		b.ReportMetric(pct50(onW), "checked_wall_ms")
		b.ReportMetric(pct50(onC), "checked_cpu_ms")
	})
	b.Run("conviction", func(b *testing.B) {
		var wall, cpu []float64
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			o := setup(b, true)
			o.SpotCheck.Probation = 0 // the default: the liar's first answers are checked
			b.StartTimer()
			w, c, res := generate(b, o, -1)
			if res.Mismatches == 0 || len(res.Reroutes) == 0 || res.Reroutes[0].Evidence != EvidenceMajority {
				b.Fatalf("no conviction: %d mismatches, re-routes %+v", res.Mismatches, res.Reroutes)
			}
			wall, cpu = append(wall, w), append(cpu, c)
		}
		b.ReportMetric(pct50(wall), "wall_ms")
		b.ReportMetric(pct50(cpu), "cpu_ms")
	})
}
