package main

import (
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

func TestAgentProgress(t *testing.T) {
	var out strings.Builder
	p := newAgentProgress(&out)
	feed := func(role, peer string) {
		p.last = time.Time{} // every piece may redraw
		p.add(&client.AgentToken{Role: role, Peer: peer, Text: "x"})
	}
	feed("reasoner", "A")
	feed("writer", "B")
	feed("reasoner", "A")
	if !strings.HasSuffix(out.String(), "agents writing: reasoner 2 · writer 1") {
		t.Fatalf("status line %q", out.String())
	}
	feed("reasoner", "C") // another holder took over: its count starts afresh
	if !strings.HasSuffix(out.String(), "agents writing: reasoner 1 · writer 1") {
		t.Fatalf("after a takeover: %q", out.String())
	}
	out.Reset()
	p.clear()
	if out.String() != "\r\033[K" {
		t.Fatalf("clear wrote %q", out.String())
	}
	out.Reset()
	p.clear()
	if out.Len() != 0 {
		t.Fatal("a second clear wrote again")
	}
	// Bursts redraw at most ten times a second.
	p.last = time.Now()
	p.add(&client.AgentToken{Role: "writer", Peer: "B"})
	if out.Len() != 0 {
		t.Fatalf("redrawn within 100 ms: %q", out.String())
	}
}
