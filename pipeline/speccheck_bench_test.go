package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/swarm"
)

// BenchmarkSpeculativeCheckCost measures what checking a greedy
// speculative answer costs on the small qwen3 shape (q8_0, 8 layers): two
// routes of two one-thread stages ([0,4)+[4,8) and [0,2)+[2,8)), the
// model itself as the draft (4 tokens a round), 64 tokens. Unchecked, the
// answer is audited after its last token (one accepted draft token asked
// about again: a probe of the history through the route, two through its
// last hop); spot-checked, the second route verifies every round beside
// the first. Each iteration runs one of each, in alternating order, so
// that a shared machine's load falls on both alike. Every stage runs in
// this process, so its CPU time is the swarm's compute. It reports the
// medians of wall and CPU time of each, the audit's share (from the last
// token to the answer's return), and what checking costs at the default
// probability.
//
//	go test -run XXX -bench SpeculativeCheckCost -benchtime 5x ./pipeline
func BenchmarkSpeculativeCheckCost(b *testing.B) {
	const n = 64
	full, cid := modelOf(b, "qwen3", "small", "q8_0")
	origin := newStagePeer(b)
	peers := servingPeers(b, full, cid, [2]int{0, 4}, [2]int{4, 8}, [2]int{0, 2}, [2]int{2, 8})
	o := originatorTrusting(b, full, swarm.NewTrust(), origin, peers...)
	for i, p := range peers { // measured (the first route is the primary) and proven (checked only when asked)
		sh := p.srv.Local()[0]
		sh.MsPerLayer = float64(1 + i/2)
		o.View.Trust().Measure(p.h.ID(), swarm.MsPerLayerKey(cid), float64(1+i/2))
		o.View.Trust().Pass(p.h.ID(), swarm.Claim{Model: cid, Start: sh.Start, End: sh.End})
	}
	o.Drafter = drafterOf(full, nil)
	type run struct{ wall, cpu, auditWall, auditCPU, accepted []float64 }
	var off, on run
	generate := func(p float64, r *run) {
		o.SpotCheck.Probability = p
		think := false
		var lastAt time.Time
		var lastCPU time.Duration
		c0, t0 := cpuTime(), time.Now()
		res, err := o.Generate(context.Background(), Request{Messages: question, Think: &think, MaxTokens: n,
			Sampling: greedy, Speculate: true, DraftMin: 4, DraftMax: 4,
			OnToken: func(string) { lastAt, lastCPU = time.Now(), cpuTime() }})
		if err != nil {
			b.Fatal(err)
		}
		end, cend := time.Now(), cpuTime()
		checked := res.SpotChecked > 0
		if checked != (p > 0) || res.DraftRounds == 0 || (p < 0 && res.VerifyAudits != 1) {
			b.Fatalf("probability %g: %d steps checked, %d rounds, %d audits", p, res.SpotChecked, res.DraftRounds, res.VerifyAudits)
		}
		r.wall = append(r.wall, ms(end.Sub(t0)))
		r.cpu = append(r.cpu, ms(cend-c0))
		r.auditWall = append(r.auditWall, ms(end.Sub(lastAt)))
		r.auditCPU = append(r.auditCPU, ms(cend-lastCPU))
		r.accepted = append(r.accepted, float64(res.DraftAccepted)/float64(max(res.Drafted, 1)))
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			generate(-1, &off)
			generate(1, &on)
		} else {
			generate(1, &on)
			generate(-1, &off)
		}
		i++
	}
	b.ReportMetric(pct50(off.wall), "unchecked_wall_ms")
	b.ReportMetric(pct50(off.cpu), "unchecked_cpu_ms")
	b.ReportMetric(pct50(off.auditWall), "audit_wall_ms")
	b.ReportMetric(pct50(off.auditCPU), "audit_cpu_ms")
	b.ReportMetric(pct50(on.wall), "checked_wall_ms")
	b.ReportMetric(pct50(on.cpu), "checked_cpu_ms")
	b.ReportMetric(pct50(off.accepted), "accepted_share")
	// Every unchecked answer is audited; one in ten (the default) is
	// spot-checked instead.
	b.ReportMetric(pct50(off.auditCPU)/(pct50(off.cpu)-pct50(off.auditCPU))*100, "audit_extra_cpu_%")
	b.ReportMetric(defaultSpotCheck*(pct50(on.cpu)/(pct50(off.cpu)-pct50(off.auditCPU))-1)*100, "spot_extra_cpu_%_at_default")
}
