package verify

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

// loadedRef is a Reference over models already loaded: layer l is held by
// the first model whose range covers it.
type loadedRef []*engine.Model

func (r loadedRef) Layer(_ context.Context, _ string, l int) (*engine.Model, error) {
	for _, m := range r {
		if in := m.Info(); in.LayerRange[0] <= l && l < in.LayerRange[1] {
			return m, nil
		}
	}
	return nil, fmt.Errorf("layer %d not loaded", l)
}

// BenchmarkChallenge is the cost of one challenge of a peer holding the
// whole 0.6b-shape synthetic q8_0 model (qwen3: 28 layers, hidden 1024,
// vocabulary 151936; $VERIFY_BENCH_SIZE=small for a quick run), claim
// [0,28), 8 positions, over loopback:
//
//   - whole: this peer holds the model too and recomputes all 28 layers;
//   - slices/mid, slices/head: this peer holds one-layer slices and
//     recomputes layer 0 and layer 14, or layer 0 and the last (the head).
//
// ns/op is the whole check; peer_ms is the peer's answer (request sent to
// the trace's last byte: its 28 single-layer runs and the transfer);
// check_ms is this peer's own recompute and comparison; sent_B and recv_B
// are the challenge's bytes; ms_per_layer is the speed the challenge
// measured (per layer and position). For scale, prefill8 is what the
// peer's layers cost in one engine call over the same 8 positions, and
// decode a decode step's ms per layer (no challenge).
//
//	go test -run XXX -bench Challenge -benchtime 5x ./verify/
func BenchmarkChallenge(b *testing.B) {
	size := os.Getenv("VERIFY_BENCH_SIZE")
	if size == "" {
		size = "0.6b"
	}
	full, cid := modelOf(b, size, "q8_0", 1)
	ph, srv, m := servingPeer(b, full, cid)
	srv.Burst, srv.Every = 1<<20, time.Millisecond
	n := m.Info().Layers
	b.Run("prefill8", func(b *testing.B) {
		tokens := []int32{11, 22, 33, 44, 55, 66, 77, 88}
		for b.Loop() {
			s, err := m.AcquireSession(b.Context())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := s.RunRange(b.Context(), 0, n, tokens, nil); err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
	// decode is a decode step's cost per layer, which the challenge's
	// ms per layer and position estimates (see Report.MsPerLayer).
	b.Run("decode", func(b *testing.B) {
		s, err := m.AcquireSession(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for b.Loop() {
			if s.Pos() >= 200 {
				s.Truncate(0)
			}
			if _, err := s.RunRange(b.Context(), 0, n, []int32{int32(s.Pos() + 1)}, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N)/float64(n), "ms_per_layer")
	})
	for _, tc := range []struct {
		name string
		ref  func() loadedRef
	}{
		{"whole", func() loadedRef { return loadedRef{m} }},
		{"slices/mid", func() loadedRef {
			return loadedRef{load(b, sliceOf(b, full, 0, 1)), load(b, sliceOf(b, full, n/2, n/2+1))}
		}},
		{"slices/head", func() loadedRef {
			return loadedRef{load(b, sliceOf(b, full, 0, 1)), load(b, sliceOf(b, full, n-1, n))}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := newHost(b)
			link(h, ph)
			c := newChecker(h, tc.ref())
			claim := swarm.Claim{Model: cid, Start: 0, End: n}
			var peer time.Duration
			var sent, recv int64
			var perLayer float64
			b.ResetTimer()
			for b.Loop() {
				rep, err := c.Check(b.Context(), ph.ID(), claim)
				if err != nil {
					b.Fatal(err)
				}
				peer += rep.Elapsed
				sent, recv = rep.SentBytes, rep.RecvBytes
				perLayer += rep.MsPerLayer
			}
			ops := float64(b.N)
			b.ReportMetric(float64(peer.Microseconds())/1000/ops, "peer_ms")
			b.ReportMetric((float64(b.Elapsed().Microseconds())-float64(peer.Microseconds()))/1000/ops, "check_ms")
			b.ReportMetric(float64(sent), "sent_B")
			b.ReportMetric(float64(recv), "recv_B")
			b.ReportMetric(perLayer/ops, "ms_per_layer")
		})
	}
}
