package moa

import (
	"testing"
	"time"

	"github.com/llmswarm/llmswarm/gossip"
)

func TestParseSpotter(t *testing.T) {
	cases := []struct {
		in   string
		want QueryType
		ok   bool
	}{
		{"MATH", Math, true},
		{"  code\n", Code, true},
		{"\"CREATIVE\".", Creative, true},
		{"simple fact", SimpleFact, true},
		{"<think>\nhmm\n</think>\n\nOPINION", Opinion, true},
		{"COMPLEX_REASONING", ComplexReasoning, true},
		{"The category is MATH", "", false},
		{"MATH CODE", "", false},
		{"", "", false},
		{"mathematics", "", false},
	}
	for _, tc := range cases {
		got, ok := ParseSpotter(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParseSpotter(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestClassifyRules(t *testing.T) {
	cases := []struct {
		q    string
		want QueryType
	}{
		{"What is the capital of France?", SimpleFact},
		{"Who wrote Hamlet?", SimpleFact},
		{"What is 17 * 23?", Math},
		{"Solve the equation x^2 - 4 = 0", Math},
		{"Write a Python function that reverses a list", Code},
		{"Why does my golang program deadlock?", Code},
		{"Write a poem about the sea", Creative},
		{"Is remote work better than office work?", Opinion},
		{"Explain how vaccines train the immune system and why boosters are needed", ComplexReasoning},
		{"Compare the economic policies of two countries over the last decade and their consequences", ComplexReasoning},
		{"Tea", SimpleFact},
	}
	for _, tc := range cases {
		if got := ClassifyRules(tc.q); got != tc.want {
			t.Errorf("ClassifyRules(%q) = %s, want %s", tc.q, got, tc.want)
		}
	}
}

func TestTargetsAndTimeouts(t *testing.T) {
	want := map[QueryType][]string{
		SimpleFact:       {Reasoner, Concise},
		ComplexReasoning: {Reasoner, Writer, Critic, Factchecker, Drafter},
		Creative:         {Writer, Reasoner, Critic},
		Code:             {Reasoner, Factchecker, Critic},
		Math:             {Reasoner, Factchecker, Concise},
		Opinion:          {Writer, Critic, Reasoner},
	}
	for qt, roles := range want {
		got := Targets(qt)
		if len(got) != len(roles) {
			t.Fatalf("%s: %v, want %v", qt, got, roles)
		}
		for i := range got {
			if got[i] != roles[i] {
				t.Fatalf("%s: %v, want %v", qt, got, roles)
			}
		}
	}
	var to Timeouts
	if to.For(ModeMoA, SimpleFact) != 0 || to.For(ModeMoA, Math) != 0 || to.For(ModeSpeed, Math) != 0 {
		t.Fatal("default timeouts are fixed caps; want none (budgets follow the device)")
	}
	if (Timeouts{Simple: time.Second}).For(ModeMoA, SimpleFact) != time.Second {
		t.Fatal("configured timeout ignored")
	}
	for _, r := range Roles {
		if SystemPrompt(r) == "" {
			t.Errorf("role %s has no system prompt", r)
		}
	}
}

func TestWeight(t *testing.T) {
	free := gossip.Load{Active: 0, Capacity: 4}
	cases := []struct {
		tps     float64
		thermal string
		load    gossip.Load
		want    float64
	}{
		{40, gossip.ThermalNominal, free, 1},
		{80, "", free, 1},
		{20, gossip.ThermalFair, free, 0.5},
		{40, gossip.ThermalSerious, free, 0.5},
		{40, gossip.ThermalCritical, free, 0.1},
		{40, "", gossip.Load{Active: 4, Capacity: 4}, 0.25},
		{0, "", free, 0.01},
	}
	for _, tc := range cases {
		if got := Weight(tc.tps, tc.thermal, tc.load); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("Weight(%v, %q, %+v) = %v, want %v", tc.tps, tc.thermal, tc.load, got, tc.want)
		}
	}
}
