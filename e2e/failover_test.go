package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
)

// TestFailoverOntoUncheckedSpare: the originator holds [0,1) of a q8_0
// model, stage A and spare S hold [1,8). S is down while the first asks
// run, so the originator never checks it; it comes back, and A is
// SIGSTOPped mid-generation. The spare's check needs reference layers of
// [1,8), which the originator holds only where A's check fetched the
// same ones: the others come from a holder, and A, the range's other
// holder, is hung. The ask must complete through S with the undisturbed
// text, and the next ask, a few seconds later, must not route through A.
//
// The originator spot-checks nothing (a check route would vet S while A
// still answers) and checks 4 layers of a claim: S's check then needs a
// layer A's did not fetch 19 times in 20.
func TestFailoverOntoUncheckedSpare(t *testing.T) {
	model := synthModel(t, "qwen3", "small", "q8_0")
	conf := filepath.Join(t.TempDir(), "origin.json")
	if err := os.WriteFile(conf, []byte(`{"pipeline":{"spot_check":-1,"spot_probation":-1},"trust":{"check_layers":4}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The originator fetches its slice from A by CID: it has no copy of
	// the model to cut reference layers from, so they come from holders.
	a := startDaemon(t, "", "--no-mdns", "--threads", "1", "--shard", model+":1-8")
	var sh client.Shards
	eventually(t, 10*time.Second, "A announces", func() bool {
		a.ctlJSON(&sh, "shards")
		return len(sh.Models) == 1
	})
	origin := startDaemon(t, "", "--no-mdns", "--threads", "1", "--config", conf, "--bootstrap", a.bootstrapAddr(),
		"--shard", sh.Models[0].ModelCID+":0-1")
	s := startDaemon(t, "", "--no-mdns", "--threads", "1", "--bootstrap", origin.bootstrapAddr(), "--shard", model+":1-8")
	idA, idS := a.peerID(), s.peerID()
	eventually(t, 60*time.Second, "three holders announced", func() bool {
		origin.ctlJSON(&sh, "shards")
		return len(sh.Models) == 1 && sh.Models[0].Covered && len(sh.Models[0].Holders) == 3
	})
	s.cmd.Process.Kill()
	<-s.exited
	eventually(t, 60*time.Second, "the originator sees the spare dead", func() bool {
		return !origin.peers()[idS]
	})

	c := client.New(origin.api, "")
	rp := float32(1.5)
	ask := func(p string, tokens int, limit time.Duration, on func(client.Event)) (*answer.Result, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		start := time.Now()
		res, err := c.Query(ctx, client.QueryRequest{Query: p, Mode: "pipeline", MaxTokens: tokens, RepeatPenalty: &rp, Stream: on != nil}, on)
		return res, time.Since(start), err
	}
	// The undisturbed answer, through A (S is down): a prompt whose
	// answer runs the whole length.
	const tokens = 160
	var prompt, ref string
	for _, p := range append(slices.Clone(pipePrompts), "Describe a quiet harbour at dawn.", "List the planets in order.") {
		res, _, err := ask(p, tokens, time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Pipeline != nil && res.Pipeline.Done == "length" {
			prompt, ref = p, res.FinalAnswer
			break
		}
	}
	if prompt == "" {
		t.Fatalf("no prompt runs %d tokens without ending", tokens)
	}

	// S comes back on its data dir (same peer ID, another port) and is
	// seen alive.
	s.start()
	eventually(t, 60*time.Second, "the originator sees the spare alive again", func() bool {
		return origin.peers()[idS]
	})

	// A is stopped at the 24th streamed token. The ask has 15 s in all
	// (undisturbed, it takes well under one; a failover costs the
	// detection, 1.25 s, the spare's check and a replay): a check that
	// waits on A (for a reference layer, or in a DHT lookup that asks A)
	// runs into the DHT's 20 s request timeout or the check's 30 s.
	var first string
	n := 0
	var stoppedAt time.Time
	res, took, err := ask(prompt, tokens, 15*time.Second, func(ev client.Event) {
		switch ev.Type {
		case "trace":
			if tr := ev.Trace; tr.Kind == "route" && first == "" && len(tr.Route) > 1 {
				first = tr.Route[1].Peer
			}
		case "token":
			if n++; n == 24 && first == idA {
				stoppedAt = time.Now()
				a.cmd.Process.Signal(syscall.SIGSTOP)
			}
		}
	})
	t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) })
	if first != idA {
		t.Fatalf("the first route took %s, not A (%s): the unchecked spare was not left for the failover", first, idA)
	}
	if stoppedAt.IsZero() {
		t.Fatal("generation ended before A was stopped")
	}
	after := time.Since(stoppedAt)
	t.Logf("ask with A stopped at token 24: %v (ended %s after the stop, ask %s in all)", err, after.Round(time.Millisecond), took.Round(time.Millisecond))
	for _, l := range strings.Split(origin.log.String(), "\n") {
		if strings.Contains(l, "reference layer fetched") {
			t.Logf("originator: %s", l)
		}
	}
	if err != nil {
		t.Fatalf("the failover onto the unchecked spare failed %s after A was stopped: %v", after.Round(time.Millisecond), err)
	}
	if res.FinalAnswer != ref {
		t.Fatalf("text after failover differs from the undisturbed run (%d vs %d bytes)", len(res.FinalAnswer), len(ref))
	}
	pr := res.Pipeline
	if len(pr.Reroutes) == 0 || pr.Reroutes[0].Failed != idA || !slices.ContainsFunc(pr.Reroutes[0].NewRoute, func(h answer.Hop) bool { return h.Peer == idS }) {
		t.Fatalf("reroutes: %+v (stopped A %s, spare S %s)", pr.Reroutes, idA, idS)
	}
	r := pr.Reroutes[0]
	t.Logf("failover onto S at token %d: detect %.0f ms, replay %.0f ms, cost %.0f ms, standby %v (%s), same %d-byte text",
		r.AtToken, r.DetectMS, r.ReplayMS, r.CostMS, r.Standby, r.Reason, len(res.FinalAnswer))

	// A is still stopped: an ask 3 s later routes around it from the start.
	// (Once the view finds A dead, 6 s after its last heartbeat, it would
	// anyway: the log says whether it still held A alive.)
	time.Sleep(3 * time.Second)
	aliveA := origin.peers()[idA]
	res, took, err = ask(prompt, 32, time.Minute, nil)
	if err != nil {
		t.Fatalf("the ask 3 s later: %v", err)
	}
	for _, h := range res.Pipeline.Hops {
		if h.Peer == idA {
			t.Fatalf("the ask 3 s later routed through the stopped A: hops %+v, reroutes %+v", res.Pipeline.Hops, res.Pipeline.Reroutes)
		}
	}
	for _, r := range res.Pipeline.Reroutes {
		if r.Failed == idA {
			t.Fatalf("the ask 3 s later met the stopped A again: reroutes %+v", res.Pipeline.Reroutes)
		}
	}
	t.Logf("the ask 3 s later (A alive in the originator's view: %v): %s, %d reroutes, hops %s",
		aliveA, took.Round(time.Millisecond), len(res.Pipeline.Reroutes), hopPeers(res.Pipeline.Hops))
}

func hopPeers(hs []answer.HopStat) string {
	var out []string
	for _, h := range hs {
		out = append(out, fmt.Sprintf("%s[%d,%d)", h.Peer[len(h.Peer)-6:], h.Start, h.End))
	}
	return strings.Join(out, " ")
}
