package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/shards"
)

// BenchmarkSpeculativeRTT: decode tok/s of a 2-stage route whose every
// link has the given round trip (a delaying proxy in front of each
// stage), plain against speculative with a draft that agrees with the
// route about $SPEC_AGREE of the time (default 0.7: the same model, with
// that share of its proposals kept and the rest replaced). The model is
// $SPEC_MODEL (default: the synthetic small qwen3 q8_0).
//
//	go test -run XXX -bench SpeculativeRTT -benchtime 1x ./pipeline/
func BenchmarkSpeculativeRTT(b *testing.B) {
	full, cid := os.Getenv("SPEC_MODEL"), ""
	if full == "" {
		full, cid = modelOf(b, "qwen3", "small", "q8_0")
	} else {
		_, _, c, err := shards.BuildManifest(full)
		if err != nil {
			b.Fatal(err)
		}
		cid = c.String()
	}
	agree := 0.7
	if s := os.Getenv("SPEC_AGREE"); s != "" {
		agree, _ = strconv.ParseFloat(s, 64)
	}
	dm, err := engine.Load(context.Background(), full, engine.Options{Threads: 1, Slots: 1, Context: 1024, Isolated: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dm.Close() })
	L := dm.Info().Layers
	origin, s0, s1 := newStagePeer(b), newStagePeer(b), newStagePeer(b)
	s0.serveFile(b, full, cid, 0, L/2)
	s1.serveFile(b, full, cid, L/2, L)
	p0, p1 := s0.behindProxy(b), s1.behindProxy(b)
	o := originatorForFile(b, full, origin, s0, s1)
	vocab := dm.Info().VocabSize
	o.Drafter = func(ctx context.Context, ref ModelRef, _ *engine.Tokenizer, s engine.Sampling) (engine.SpecModel, func(), error) {
		sess, err := dm.NewSession()
		if err != nil {
			return nil, nil, err
		}
		d := &unsure{SpecModel: engine.SessionDraft(sess, s.Options()),
			agree: agree, vocab: vocab, r: rand.New(rand.NewPCG(1, 2))}
		return d, sess.Close, nil
	}
	think := false
	const n = 96
	for _, rtt := range []time.Duration{0, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond} {
		p0.SetDelay(rtt / 2)
		p1.SetDelay(rtt / 2)
		for _, spec := range []bool{false, true} {
			b.Run(fmt.Sprintf("rtt=%v/speculative=%v", rtt, spec), func(b *testing.B) {
				var tps, acc float64
				for range b.N {
					res, err := o.Generate(b.Context(), Request{Messages: question, Think: &think, MaxTokens: n,
						Sampling: greedy, Speculate: spec})
					if err != nil {
						b.Fatal(err)
					}
					tps += res.DecodeTPS
					if res.Drafted > 0 {
						acc += float64(res.DraftAccepted) / float64(res.Drafted)
					}
				}
				b.ReportMetric(tps/float64(b.N), "tok/s")
				if spec {
					b.ReportMetric(acc/float64(b.N), "accepted")
				}
			})
		}
	}
}

// unsure keeps a share of its draft's proposals and replaces the others
// with another token: a draft that agrees with the route that often.
type unsure struct {
	engine.SpecModel
	agree float64
	vocab int
	r     *rand.Rand
}

func (u *unsure) Prefill(ctx context.Context, tokens []int32) (int32, engine.Dist, error) {
	t, q, err := u.SpecModel.Prefill(ctx, tokens)
	if err == nil && u.r.Float64() >= u.agree {
		t, q = (t+1)%int32(u.vocab), engine.Dist{} // not drawn from q: certain to the draft
	}
	return t, q, err
}
