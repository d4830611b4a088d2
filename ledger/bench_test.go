package ledger

import (
	"testing"
	"time"
)

// BenchmarkReceipt is what acknowledging work costs, per item, when a
// receipt carries n items: counted by the client, signed, sent as the
// receipt protocol's frame, decoded and checked by the server, and
// counted there. It reports the frame's bytes per item.
func BenchmarkReceipt(b *testing.B) {
	for _, n := range []int{1, 16} {
		b.Run(map[int]string{1: "1-item", 16: "16-items"}[n], func(b *testing.B) {
			ck := &clock{t: time.Now()}
			clientKey, client := newKey(b)
			_, server := newKey(b)
			cl, sl := ledgerAt(client, ck, Options{}), ledgerAt(server, ck, Options{})
			it := Item{Kind: KindMoA, Model: "bagaaieraa6ilxeo3xnro5nfylbvqgluvyeqf6i65zim3nkn5725u7x2s4ypa", Role: "reasoner", Tokens: 300}
			var size int
			b.ReportAllocs()
			for b.Loop() {
				items := make([]Item, n)
				for i := range items {
					items[i] = it
					if err := cl.Take(server, it); err != nil {
						b.Fatal(err)
					}
				}
				s, err := cl.Issue(server, items, clientKey)
				if err != nil {
					b.Fatal(err)
				}
				w := s.wire()
				size = frames.Size(len(w))
				got, err := decodeSigned(w)
				if err != nil {
					b.Fatal(err)
				}
				if err := sl.Accept(got); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(size)/float64(n), "bytes/item")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/item")
		})
	}
}
