package moa

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/gossip"
	"github.com/llmswarm/llmswarm/swarm"
)

// TestNoAgentsNamesIdleHolders: when the only live holders of the roles a
// query needs take no new work (a phone at 10% battery, a board running
// hot), ErrNoAgents names them and why, rather than saying no live peer
// serves the role: the user can plug the phone in.
func TestNoAgentsNamesIdleHolders(t *testing.T) {
	origin := newTestPeer(t, 4)
	phone := newTestPeer(t, 2, Reasoner, Drafter)
	v := swarm.NewView(origin.h.ID(), swarm.Liveness{})
	v.Observe(&gossip.Capability{PeerID: origin.h.ID().String(), Seq: 1}, time.Now())
	v.Observe(&gossip.Capability{PeerID: phone.h.ID().String(), Seq: 1, Roles: phone.srv.Roles(),
		Thermal: gossip.ThermalSerious, Battery: &gossip.Battery{Percent: 10}}, time.Now())
	o := &Originator{Host: origin.h, View: v}
	want := "takes no new work: battery 10%, not charging, thermal serious"
	_, err := o.Direct(t.Context(), Reasoner, Query{Prompt: "Who wrote Hamlet?", MaxTokens: 2})
	if !errors.Is(err, ErrNoAgents) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "reasoner") {
		t.Errorf("direct: %v, want ErrNoAgents naming the phone's battery and heat", err)
	}
	_, err = o.Ask(t.Context(), Query{Prompt: "Who wrote Hamlet?", MaxTokens: 2})
	if !errors.Is(err, ErrNoAgents) || !strings.Contains(err.Error(), want) {
		t.Errorf("moa: %v, want ErrNoAgents naming the phone", err)
	}
	_, err = o.Ask(t.Context(), Query{Prompt: "Who wrote Hamlet?", MaxTokens: 2, Mode: ModeSpeed})
	if !errors.Is(err, ErrNoAgents) || !strings.Contains(err.Error(), want) {
		t.Errorf("speed: %v, want ErrNoAgents naming the phone", err)
	}
	// With no holder at all, the error is as before.
	o.View = viewOf(origin)
	if _, err := o.Direct(t.Context(), Reasoner, Query{Prompt: "Who wrote Hamlet?"}); !errors.Is(err, ErrNoAgents) || strings.Contains(err.Error(), "takes no new work") {
		t.Errorf("no holder: %v", err)
	}
}
