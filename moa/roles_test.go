package moa

import (
	"slices"
	"testing"
)

// TestRolesAreAnswers: the roles' constants, their voices and answer's
// list of them (what swarmctl checks a mode against) are the same set.
func TestRolesAreAnswers(t *testing.T) {
	want := []string{Reasoner, Writer, Concise, Critic, Factchecker, Drafter, Spotter, Aggregator}
	if !slices.Equal(Roles, want) {
		t.Fatalf("Roles %v, want %v", Roles, want)
	}
	for _, r := range Roles {
		if !IsRole(r) {
			t.Errorf("role %s has no system prompt", r)
		}
	}
	if len(systemPrompts) != len(Roles) {
		t.Errorf("%d system prompts for %d roles", len(systemPrompts), len(Roles))
	}
}
