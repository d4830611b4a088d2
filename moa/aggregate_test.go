package moa

import (
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/internal/engine"
	"github.com/llmswarm/llmswarm/swarm"
)

func TestFairCap(t *testing.T) {
	for _, c := range []struct {
		lengths []int
		budget  int
		want    int
	}{
		{[]int{10, 20}, 100, -1},       // fits: no cut
		{[]int{10, 100, 100}, 110, 50}, // the short one whole, the long ones share the rest
		{[]int{100, 100}, 50, 25},
		{[]int{5, 5, 500}, 30, 20},
		{[]int{100}, 0, 0},
	} {
		got := fairCap(c.lengths, c.budget)
		if got != c.want {
			t.Errorf("fairCap(%v, %d) = %d, want %d", c.lengths, c.budget, got, c.want)
		}
		if got >= 0 {
			sum := 0
			for _, l := range c.lengths {
				sum += min(l, got)
			}
			if sum > c.budget {
				t.Errorf("fairCap(%v, %d): %d chars over budget", c.lengths, c.budget, sum)
			}
		}
	}
}

func TestAggregationPromptKeepsQuestionAndLabelsPartial(t *testing.T) {
	q := strings.Repeat("why ", 300)
	answers := []answer.Agent{{Role: Reasoner, Content: strings.Repeat("a", 5000)}, {Role: Critic, Content: "short", Partial: true}}
	p := aggregationPrompt(q, answers, 1000)
	if !strings.Contains(p, q) {
		t.Fatal("the question was cut")
	}
	if !strings.Contains(p, "short") || !strings.Contains(p, "cut off before it finished") {
		t.Fatalf("short partial answer missing or unlabelled:\n%s", p)
	}
	if strings.Count(p, "a") > 1000 || !strings.Contains(p, "[...]") {
		t.Fatal("the long answer was not trimmed to the budget")
	}
}

// TestAggregatorPromptFitsItsContext: long agent answers and an aggregator
// whose context is small, announced falsely large (a stale or lying
// record): the aggregator answers too_long with its counts, the answers are
// trimmed by the overflow and the same aggregator answers.
func TestAggregatorPromptFitsItsContext(t *testing.T) {
	origin := newTestPeer(t, 4)
	b := newTestPeer(t, 4, Reasoner, Concise)
	agg := newRolePeer(t, tinyModel, engine.Options{Threads: 1, Slots: 2, Context: 2048}, Aggregator)
	tr := swarm.NewTrust()
	v := swarm.NewView(origin.h.ID(), swarm.Liveness{}, swarm.WithTrust(tr))
	for i, p := range []*testPeer{origin, b, agg} {
		verifyRoles(tr, p)
		origin.h.Peerstore().AddAddrs(p.h.ID(), p.h.Addrs(), time.Hour)
		roles := p.srv.Roles()
		for j := range roles {
			if roles[j].Role == Aggregator {
				roles[j].Context = 4096
			}
		}
		v.Observe(&gossip.Capability{PeerID: p.h.ID().String(), Seq: uint64(i + 1), Roles: roles, Load: gossip.Load{Capacity: 4}}, time.Now())
	}
	o := &Originator{Host: origin.h, View: v}
	res, err := o.Ask(t.Context(), Query{Prompt: "What is the capital of France?", MaxTokens: 600, Sampling: engine.Sampling{RepeatPenalty: 1.3}})
	if err != nil {
		t.Fatal(err)
	}
	long := 0
	for _, a := range res.AgentResponses {
		long += a.Tokens
	}
	if long < 600 { // untrimmed, such answers take ~2700 prompt tokens here
		t.Fatalf("the agents wrote only %d tokens: nothing to fit", long)
	}
	if res.Aggregator == nil || res.Aggregator.Error != "" || res.Aggregator.Peer != agg.h.ID().String() {
		t.Fatalf("aggregator: %+v", res.Aggregator)
	}
	if res.Aggregator.Prompt >= 2048 {
		t.Fatalf("aggregator prompt of %d tokens in a 2048-token context", res.Aggregator.Prompt)
	}
	t.Logf("%d tokens of answers fitted into a %d-token aggregator prompt", long, res.Aggregator.Prompt)
}

// TestNoEmptyAnswerOverNonEmpty: the highest-weight answer is empty; the
// final answer is a non-empty one.
func TestNoEmptyAnswerOverNonEmpty(t *testing.T) {
	as := []answer.Agent{{Role: Reasoner, Weight: 1, Content: "  "}, {Role: Concise, Weight: 0.2, Content: "Paris"},
		{Role: Writer, Weight: 0.9, Content: "Par", Partial: true}}
	if got := bestAnswer(as); got.Content != "Paris" {
		t.Fatalf("best answer %q, want the complete non-empty one", got.Content)
	}
	if got := bestAnswer(as[:1]); got.Role != Reasoner {
		t.Fatal("a lone empty answer must still be returned")
	}
	if got := bestAnswer([]answer.Agent{as[0], as[2]}); got.Content != "Par" {
		t.Fatalf("best answer %q, want the partial non-empty one over the empty one", got.Content)
	}
}
