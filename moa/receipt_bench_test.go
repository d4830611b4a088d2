package moa

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/metrics"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/ledger"
)

// BenchmarkReceiptShare is what receipts cost beside the answers they
// acknowledge: an originator asks a role peer questions of 64 tokens,
// each acknowledged, and the receipt protocol's bytes (both ways, stream
// setup included) are reported as a share of the MoA protocol's, with a
// receipt per answer (delay 1ms) and one for all within the delay (1h,
// sent at Close).
func BenchmarkReceiptShare(b *testing.B) {
	model := synthModel(b, "tiny", "f32")
	for _, delay := range []time.Duration{time.Millisecond, time.Hour} {
		b.Run("delay="+delay.String(), func(b *testing.B) {
			newHost := func(bw *metrics.BandwidthCounter) host.Host {
				h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.BandwidthReporter(bw))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { h.Close() })
				return h
			}
			bw := metrics.NewBandwidthCounter()
			oh, sh := newHost(bw), newHost(metrics.NewBandwidthCounter())
			oh.Peerstore().AddAddrs(sh.ID(), sh.Addrs(), time.Hour)
			srv := NewServer(sh, nil)
			b.Cleanup(func() { srv.Close() })
			rm, err := LoadRole(b.Context(), Reasoner, model, engine.Options{Threads: 1, Slots: 1, Context: 1024})
			if err != nil {
				b.Fatal(err)
			}
			srv.Add(rm)
			sx, err := ledger.NewExchange(sh, ledger.New(sh.ID(), ledger.Options{}), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(sx.Close)
			ox, err := ledger.NewExchange(oh, ledger.New(oh.ID(), ledger.Options{}), nil)
			if err != nil {
				b.Fatal(err)
			}
			ox.Delay = delay
			req := &Request{Role: Reasoner, Messages: []Message{{Role: "user", Content: "Why is the sky blue?"}}, MaxTokens: 64}
			for b.Loop() {
				pieces := 0
				d, err := Call(b.Context(), oh, sh.ID(), req, func(string, string) { pieces++ })
				if err != nil {
					b.Fatal(err)
				}
				ox.Ack(sh.ID(), ledger.Item{Kind: ledger.KindMoA, Model: d.ModelCID, Role: Reasoner, Tokens: receiptTokens(req, d, pieces)})
			}
			ox.Close()                  // what is pending goes now
			time.Sleep(2 * time.Second) // the counters' totals are swept in once a second
			m := bw.GetBandwidthForProtocol(ProtocolID)
			r := bw.GetBandwidthForProtocol(ledger.ProtocolID)
			if r.TotalOut == 0 {
				b.Fatal("no receipt was sent")
			}
			b.ReportMetric(float64(m.TotalIn+m.TotalOut)/float64(b.N), "moa_bytes/answer")
			b.ReportMetric(float64(r.TotalIn+r.TotalOut)/float64(b.N), "receipt_bytes/answer")
			b.ReportMetric(100*float64(r.TotalIn+r.TotalOut)/float64(m.TotalIn+m.TotalOut), "receipt_%")
		})
	}
}
