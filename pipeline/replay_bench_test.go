package pipeline

import (
	"context"
	"fmt"
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
			shapes := []int{len(prompt)}
			for range gen {
				shapes = append(shapes, 1)
			}
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
