package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/llmswarm/llmswarm/client"
)

// agentProgress shows, on a terminal, how far each agent has written while
// the final answer is not yet streaming: one status line rewritten in
// place, at most ten times a second, cleared before the answer prints.
type agentProgress struct {
	w      io.Writer
	pieces map[string]int
	peers  map[string]string
	last   time.Time
	shown  bool
}

func newAgentProgress(w io.Writer) *agentProgress {
	return &agentProgress{w: w, pieces: map[string]int{}, peers: map[string]string{}}
}

func (p *agentProgress) add(t *client.AgentToken) {
	if p.peers[t.Role] != t.Peer { // another holder took the role over: count afresh
		p.peers[t.Role], p.pieces[t.Role] = t.Peer, 0
	}
	p.pieces[t.Role]++
	if time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	roles := make([]string, 0, len(p.pieces))
	for r := range p.pieces {
		roles = append(roles, r)
	}
	slices.Sort(roles)
	parts := make([]string, len(roles))
	for i, r := range roles {
		parts[i] = fmt.Sprintf("%s %d", r, p.pieces[r])
	}
	fmt.Fprintf(p.w, "\r\033[Kagents writing: %s", strings.Join(parts, " · "))
	p.shown = true
}

// clear removes the status line.
func (p *agentProgress) clear() {
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}
