package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkNATPunch: each iteration builds the NAT topology afresh, starts
// the relay and two peers behind NATs, and waits up to 10 s for a punched
// connection. Reports the share of iterations that went direct and the
// median times (from B's start) to a relay slot on both, to each other
// alive, and to the punched connection.
//
//	go test -run XXX -bench NATPunch -benchtime 20x ./e2e
//
// Each transport is punched alone (every peer listens on it only).
func BenchmarkNATPunch(b *testing.B) {
	for _, nat := range []string{"port-preserving/tcp", "port-preserving/quic", "symmetric/tcp", "symmetric/quic"} {
		b.Run(nat, func(b *testing.B) {
			var relayed, alive, direct []float64
			punched := 0
			for range b.N {
				tp := newNATTopo(b)
				if strings.HasPrefix(nat, "symmetric") {
					symmetricNAT(b, tp.nat2)
				}
				ns := startNATSwarm(b, tp, natSwarmOpts{quic: strings.HasSuffix(nat, "quic")})
				relayed = append(relayed, msOf(ns.toRelayed))
				alive = append(alive, msOf(ns.toAlive))
				for time.Since(ns.started) < 10*time.Second {
					if slices.Contains(connKinds(ns.a, ns.bID), "punched") {
						punched++
						direct = append(direct, msOf(time.Since(ns.started)))
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				ns.stop()
				tp.down()
			}
			b.ReportMetric(100*float64(punched)/float64(b.N), "%punched")
			b.ReportMetric(median(relayed), "ms-to-relayed")
			b.ReportMetric(median(alive), "ms-to-alive")
			if len(direct) > 0 {
				b.ReportMetric(median(direct), "ms-to-direct")
			}
		})
	}
}

// BenchmarkNATPipeline: the pipeline A|B of the tiny model across the two
// NATs, in a private swarm, over the punched connection and over the
// relay (hole punching off). Each iteration is one 64-token generation;
// reports median decode tok/s and A→B transfer ms per token.
//
//	go test -run XXX -bench NATPipeline -benchtime 10x ./e2e
func BenchmarkNATPipeline(b *testing.B) {
	model := tinyModel(b)
	for _, path := range []string{"punched", "relayed"} {
		b.Run(path, func(b *testing.B) {
			ns := startNATSwarm(b, newNATTopo(b), natSwarmOpts{model: model, keyFile: swarmKeyFile(b), noPunch: path == "relayed"})
			defer ns.stop()
			if path == "punched" {
				eventually(b, 30*time.Second, "a punched connection", func() bool {
					return slices.Contains(connKinds(ns.a, ns.bID), "punched")
				})
			}
			var tps, xfer []float64
			b.ResetTimer()
			for range b.N {
				out, errOut, code := ns.a.ctl("--json", "ask", "--mode", "pipeline", "--dtype", "f32", "--max-tokens", "64",
					"--repeat-penalty", "1.5", "Tell me about the swarm.")
				if code != 0 {
					b.Fatalf("ask: exit %d: %s", code, errOut)
				}
				var res struct {
					Pipeline struct {
						DecodeTPS float64 `json:"decode_tok_s"`
						Hops      []struct {
							Conn       string  `json:"conn"`
							TransferMS float64 `json:"transfer_ms_per_token"`
						} `json:"hops"`
					} `json:"pipeline"`
				}
				if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Pipeline.Hops) != 2 {
					b.Fatalf("ask: %v\n%s", err, out)
				}
				if got := res.Pipeline.Hops[1].Conn; got != path {
					b.Fatalf("A reached B over %q, want %q", got, path)
				}
				tps = append(tps, res.Pipeline.DecodeTPS)
				xfer = append(xfer, res.Pipeline.Hops[1].TransferMS)
			}
			b.ReportMetric(median(tps), "tok/s")
			b.ReportMetric(median(xfer), "ms-transfer/token")
		})
	}
}

func msOf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
