package moa

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
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

// REVIVE's routing table (its README, "Query Routing"): one example per type.
var reviveExamples = []struct {
	q    string
	want QueryType
}{
	{"What is the capital of Australia?", SimpleFact},
	{"Should AI be granted legal personhood?", ComplexReasoning},
	{"Write a poem about distributed computing", Creative},
	{"Explain the CAP theorem", Code},
	{"Explain the Monty Hall problem", Math},
	{"Is nuclear power necessary for climate change?", Opinion},
}

func TestRulesRouteREVIVEExamples(t *testing.T) {
	for _, tc := range reviveExamples {
		if got := ClassifyRules(tc.q); got != tc.want {
			t.Errorf("ClassifyRules(%q) = %s, want %s", tc.q, got, tc.want)
		}
	}
}

type labelled struct {
	line int
	q    string
	want QueryType
}

// readLabelled parses a routing set: one "query<TAB>TYPE" per line; blank
// lines and lines starting with # are skipped. Any other shape is an error
// naming its line.
func readLabelled(r io.Reader) ([]labelled, error) {
	var out []labelled
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: want 2 tab-separated fields, got %d: %q", n, len(f), line)
		}
		q := strings.TrimSpace(f[0])
		if q == "" {
			return nil, fmt.Errorf("line %d: empty query", n)
		}
		want := QueryType(strings.TrimSpace(f[1]))
		known := false
		for _, qt := range QueryTypes {
			known = known || qt == want
		}
		if !known {
			return nil, fmt.Errorf("line %d: unknown type %q", n, f[1])
		}
		out = append(out, labelled{n, q, want})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %v", n+1, err)
	}
	return out, nil
}

func TestReadLabelledRejectsMalformedLines(t *testing.T) {
	for _, bad := range []string{
		"# header\nWho wrote Hamlet?\tSIMPLE_FACT\nno tab here\n",
		"# header\nWho wrote Hamlet?\tSIMPLE_FACT\nToo\tmany\tfields\n",
		"# header\nWho wrote Hamlet?\tSIMPLE_FACT\nWhat is 2+2?\tARITHMETIC\n",
		"# header\nWho wrote Hamlet?\tSIMPLE_FACT\n \tMATH\n",
	} {
		_, err := readLabelled(strings.NewReader(bad))
		if err == nil || !strings.Contains(err.Error(), "line 3:") {
			t.Errorf("readLabelled(%q): err = %v, want one naming line 3", bad, err)
		}
	}
}

func TestRulesOnLabelledSet(t *testing.T) {
	f, err := os.Open("testdata/routing.tsv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	set, err := readLabelled(f)
	if err != nil {
		t.Fatalf("testdata/routing.tsv: %v", err)
	}
	if len(set) < 66 {
		t.Fatalf("testdata/routing.tsv has %d queries, want at least 66", len(set))
	}
	right := 0
	for _, it := range set {
		if got := ClassifyRules(it.q); got == it.want {
			right++
		} else {
			t.Logf("misrouted (line %d): %q -> %s, want %s", it.line, it.q, got, it.want)
		}
	}
	acc := float64(right) / float64(len(set))
	t.Logf("accuracy %d/%d = %.1f%%", right, len(set), 100*acc)
	if acc < 0.90 {
		t.Errorf("accuracy %.1f%% is below 90%%", 100*acc)
	}
}

func BenchmarkClassifyRules(b *testing.B) {
	qs := make([]string, len(reviveExamples))
	for i, e := range reviveExamples {
		qs[i] = e.q
	}
	for i := 0; i < b.N; i++ {
		ClassifyRules(qs[i%len(qs)])
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
