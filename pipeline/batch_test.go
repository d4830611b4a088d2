package pipeline

import (
	"sync"
	"testing"
)

// TestBatchedStages: stages that batch (a node's pipeline.batch) carry
// three generations at once through a 2-stage pipeline, their steps run
// together in the stages' graphs, and each gives one machine's tokens (f32
// weights: batching moves the logits by rounding far below a token's
// margin here; see engine TestBatchedSameTokens for where it may not).
func TestBatchedStages(t *testing.T) {
	const n = 24
	full, cid := modelOf(t, "qwen3", "small", "f32")
	want := referenceFile(t, full, question, n)
	origin := newStagePeer(t)
	var stages []*stagePeer
	for _, r := range [][2]int{{0, 4}, {4, 8}} {
		p := newStagePeer(t)
		p.batch = true
		p.serveFile(t, full, cid, r[0], r[1])
		stages = append(stages, p)
	}
	o := originatorForFile(t, full, origin, stages...)
	const streams = 3
	got := make([][]int32, streams)
	errs := make([]error, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			think := false
			res, err := o.Generate(t.Context(), Request{Messages: question, Think: &think, MaxTokens: n, Sampling: greedy})
			if err == nil {
				got[i] = res.Tokens
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i := range streams {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !sameTokens(got[i], want) {
			t.Fatalf("generation %d: tokens differ from one machine:\n got %v\nwant %v", i, got[i], want)
		}
	}
	for i, p := range stages {
		rounds, steps := p.srv.Local()[0].Model.Batching()
		if steps <= rounds {
			t.Errorf("stage %d ran %d steps in %d rounds: nothing batched", i, steps, rounds)
		}
		t.Logf("stage %d: %d steps in %d rounds", i, steps, rounds)
	}
}
